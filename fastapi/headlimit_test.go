package fastapi

import (
	"bytes"
	"net"
	"strings"
	"testing"
)

// memConn reads from a byte slice, in reads of at most chunk bytes.
type memConn struct {
	net.Conn
	data  []byte
	chunk int
}

func (c *memConn) Read(p []byte) (int, error) {
	n := copy(p[:min(len(p), c.chunk)], c.data)
	c.data = c.data[n:]
	return n, nil
}

// TestHeadConnTracksLastLF: after any sequence of reads, requestLineOverflow
// says whether the last window bytes read hold no LF, which is what the
// full head buffer holds when fasthttp gives up.
func TestHeadConnTracksLastLF(t *testing.T) {
	t.Parallel()
	const window = 64
	for _, c := range []struct {
		name   string
		stream string
		chunk  int
		want   bool
	}{
		{"request line fills the window", "GET /" + strings.Repeat("a", 100), 7, true},
		{"LF inside the last window", "GET / HTTP/1.1\r\n" + strings.Repeat("h", 60), 5, false},
		{"LF just outside the last window", "x\n" + strings.Repeat("a", window), 3, true},
		{"LF is the last window's first byte", "x\n" + strings.Repeat("a", window-1), 1000, false},
		{"one read far longer than the window", strings.Repeat("b\n", 100) + strings.Repeat("a", window), 10000, true},
		{"body with LFs, then a long request line", strings.Repeat("{\n}", 50) + "GET /" + strings.Repeat("u", window), 17, true},
		{"body without LF, then a head with headers", strings.Repeat("z", 500) + "GET / HTTP/1.1\r\nCookie: " + strings.Repeat("c", 40), 9, false},
	} {
		hc := &headConn{Conn: &memConn{data: []byte(c.stream), chunk: c.chunk}, window: window}
		buf := make([]byte, 4096)
		for {
			n, _ := hc.Read(buf)
			if n == 0 {
				break
			}
		}
		last := c.stream[max(0, len(c.stream)-window):]
		if ref := !strings.Contains(last, "\n"); ref != c.want {
			t.Fatalf("%s: the case itself is wrong (reference %v)", c.name, ref)
		}
		if got := hc.requestLineOverflow(); got != c.want {
			t.Errorf("%s: requestLineOverflow = %v, want %v (sinceLF %d)", c.name, got, c.want, hc.sinceLF)
		}
	}
}

func TestLastLF(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 511, 512, 513, 1500, 40000} {
		b := bytes.Repeat([]byte{'a'}, n)
		for _, at := range []int{-1, 0, n / 3, n - 1} {
			if at >= n {
				continue
			}
			c := bytes.Clone(b)
			if at >= 0 {
				c[at] = '\n'
			}
			if got, want := lastLF(c), bytes.LastIndexByte(c, '\n'); got != want {
				t.Errorf("lastLF(len %d, LF at %d) = %d, want %d", n, at, got, want)
			}
		}
	}
}

// BenchmarkHeadConnRead measures what the LF tracking costs per byte read:
// 32 KiB reads of a JSON body without LF (the worst case), against the
// same reads unwrapped.
func BenchmarkHeadConnRead(b *testing.B) {
	data := bytes.Repeat([]byte(`{"queue":"q","payload":"abcdefgh"},`), 1<<15) // ~1.1 MiB
	buf := make([]byte, 32<<10)
	for _, wrapped := range []bool{false, true} {
		name := "raw"
		if wrapped {
			name = "headConn"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				var c net.Conn = &memConn{data: data, chunk: len(buf)}
				if wrapped {
					c = &headConn{Conn: c, window: DefaultMaxHeaderBytes}
				}
				for {
					if n, _ := c.Read(buf); n == 0 {
						break
					}
				}
			}
		})
	}
}
