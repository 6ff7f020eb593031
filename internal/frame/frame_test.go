package frame

import (
	"strings"
	"testing"
)

// TestTokenEqual: only the token itself matches; a prefix, an extension, a
// token of the same length with one byte changed and the empty token do
// not.
func TestTokenEqual(t *testing.T) {
	want := []byte("s3cret-token")
	if !TokenEqual([]byte("s3cret-token"), want) {
		t.Fatal("the token itself did not match")
	}
	for _, got := range []string{"", "s3cret", "s3cret-token2", "s3cret-tokeN", strings.Repeat("x", len(want))} {
		if TokenEqual([]byte(got), want) {
			t.Errorf("%q matched %q", got, want)
		}
	}
	if TokenEqual([]byte("x"), nil) || !TokenEqual(nil, []byte{}) {
		t.Error("the empty token: only the empty token matches it")
	}
}

// TestCheckToken: visible ASCII up to MaxTokenBytes passes; longer, spaces
// and control bytes are refused without quoting the token.
func TestCheckToken(t *testing.T) {
	for _, ok := range []string{"s3cret", strings.Repeat("y", MaxTokenBytes)} {
		if err := CheckToken(ok); err != nil {
			t.Errorf("token of %d bytes refused: %v", len(ok), err)
		}
	}
	for _, bad := range []string{strings.Repeat("x", MaxTokenBytes+1), "s3c ret", "s3c\nret", "\x00s3cret", "café"} {
		err := CheckToken(bad)
		if err == nil {
			t.Errorf("token %.8q taken", bad)
		} else if strings.Contains(err.Error(), bad) {
			t.Errorf("the error quotes the token: %v", err)
		}
	}
}

// TestBearerToken: the scheme of an Authorization value matches in any
// case (RFC 7235 section 2.1, RFC 6750 section 2.1), with one or more
// spaces before the token; another scheme, no token, or no space is no
// bearer token.
func TestBearerToken(t *testing.T) {
	for _, v := range []string{"Bearer s3cret", "bearer s3cret", "BEARER s3cret", "bEaReR s3cret", "Bearer   s3cret"} {
		if got, ok := BearerToken(v); !ok || got != "s3cret" {
			t.Errorf("BearerToken(%q) = %q, %v; want s3cret", v, got, ok)
		}
	}
	for _, v := range []string{"", "Bearer", "Bearer ", "Bearers3cret", "Basic s3cret", "Bearer\ts3cret", " Bearer s3cret", "Bear s3cret"} {
		if got, ok := BearerToken(v); ok {
			t.Errorf("BearerToken(%q) = %q, true; want no bearer token", v, got)
		}
	}
}
