package pg

import "testing"

// TestTakeCombined checks what one combined transaction takes of the pops
// queued (takeCombined): queue order, at most popCombineMax, at most
// popCombineGroupMax of one consumer group (the skipped ones first in
// what is left, in their order), and at most popCombineGroupMax when
// popCombineMax pops of their batch would hold more than
// popCombineMessages messages.
func TestTakeCombined(t *testing.T) {
	queue := func(batch int, groups ...string) []*popWaiter {
		var ws []*popWaiter
		for _, g := range groups {
			ws = append(ws, &popWaiter{req: PopRequest{Group: g, Batch: batch}})
		}
		return ws
	}
	names := func(ws []*popWaiter) string {
		s := ""
		for _, w := range ws {
			s += w.req.Group
		}
		return s
	}
	many := func(n int, pattern string) []string {
		var gs []string
		for i := range n {
			gs = append(gs, string(pattern[i%len(pattern)]))
		}
		return gs
	}
	for _, tc := range []struct {
		name        string
		batch       int
		groups      []string
		taken, left string
	}{
		{"one pop", 100, []string{"a"}, "a", ""},
		{"one group, its share", 100, many(10, "a"), "aaaaaaaa", "aa"},
		{"five groups, sixteen", 100, many(20, "abcde"), "abcdeabcdeabcdea", "bcde"},
		{"a group over its share waits, the others go", 100, many(12, "aaaaaaaaab"), "aaaaaaaab", "aaa"},
		{"large batches, eight in all", 2000, many(20, "abcde"), "abcdeabc", "deabcdeabcde"},
		{"a thousand a pop, sixteen", 1000, many(20, "abcde"), "abcdeabcdeabcdea", "bcde"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := queue(tc.batch, tc.groups...)
			taken, left := takeCombined(q)
			if got := names(taken); got != tc.taken {
				t.Errorf("taken %q, want %q", got, tc.taken)
			}
			if got := names(left); got != tc.left {
				t.Errorf("left %q, want %q", got, tc.left)
			}
			if len(taken)+len(left) != len(q) {
				t.Errorf("%d taken + %d left of %d queued", len(taken), len(left), len(q))
			}
			// Order within each part is queue order.
			pos := map[*popWaiter]int{}
			for i, w := range q {
				pos[w] = i
			}
			for _, part := range [][]*popWaiter{taken, left} {
				for i := 1; i < len(part); i++ {
					if pos[part[i]] < pos[part[i-1]] {
						t.Errorf("out of queue order: queued %d before %d", pos[part[i-1]], pos[part[i]])
					}
				}
			}
		})
	}
}
