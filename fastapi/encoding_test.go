package fastapi

import (
	"strings"
	"testing"
)

// TestShapeErrorNumbers: a number that does not fit its field names the
// field and the reason, not "must be a number, not a number".
func TestShapeErrorNumbers(t *testing.T) {
	var v struct {
		B uint8   `json:"b"`
		U uint    `json:"u"`
		I int     `json:"i"`
		F float64 `json:"f"`
	}
	for _, tt := range []struct{ body, want string }{
		{`{"f":1e400}`, `"f" is out of range for a number`},
		{`{"b":300}`, `"b" must be a whole number (no fraction or exponent) within the field's range`},
		{`{"u":-1}`, `"u" must be a whole number (no fraction or exponent) within the field's range`},
		{`{"i":1.5}`, `"i" must be a whole number (no fraction or exponent) within the field's range`},
		{`{"i":"7"}`, `"i" must be an integer, not a string`},
	} {
		if err := decodeObject([]byte(tt.body), &v); err == nil || err.Error() != tt.want {
			t.Errorf("%s: %v, want %s", tt.body, err, tt.want)
		}
	}
}

// TestDecodeObjectTooDeep: a body nested past what the decoder accepts is
// refused saying so, with its depth, not as "malformed JSON".
func TestDecodeObjectTooDeep(t *testing.T) {
	var v struct {
		X any `json:"x"`
	}
	deep := `{"x":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`
	if err := decodeObject([]byte(deep), &v); err == nil || err.Error() != "JSON nested too deep (100001 levels)" {
		t.Fatalf("100,000 levels: %v", err)
	}
	if err := decodeObject([]byte(`{"x":[[1]]}`), &v); err != nil {
		t.Fatalf("shallow: %v", err)
	}
}
