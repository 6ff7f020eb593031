package storage

import (
	"testing"

	"github.com/concord-kv/concord/internal/keys"
)

// BenchmarkPointRead compares a point read of the live engine (the read
// path before views) with one through a view taken per read, and through a
// view shared by 8 reads released together, and (view-points-8) by 8 reads of
// one ReadPoints.
func BenchmarkPointRead(b *testing.B) {
	e, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	k := keys.User(7, []byte("k"))
	if err := e.db.Set(k, []byte("v"), nil); err != nil {
		b.Fatal(err)
	}
	get := func(r Reader) error {
		_, closer, err := r.Get(k)
		if err == nil {
			err = closer.Close()
		}
		return err
	}
	b.Run("engine", func(b *testing.B) {
		for b.Loop() {
			if err := e.Read(get); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("view-per-read", func(b *testing.B) {
		for b.Loop() {
			v, err := e.NewReadView(1)
			if err != nil {
				b.Fatal(err)
			}
			if err := v.Read(get); err != nil {
				b.Fatal(err)
			}
			v.Release()
		}
	})
	b.Run("view-shared-by-8", func(b *testing.B) {
		var v *ReadView
		i := 0
		for b.Loop() {
			if i%8 == 0 {
				if v, err = e.NewReadView(8); err != nil {
					b.Fatal(err)
				}
			}
			i++
			if err := v.Read(get); err != nil {
				b.Fatal(err)
			}
			v.Release()
		}
	})
	b.Run("view-points-8", func(b *testing.B) {
		// 8 reads released together and read by one ReadPoints, as a
		// pipeline's batch of GETs is.
		var v *ReadView
		i := 0
		for b.Loop() {
			if i%8 == 0 {
				if v, err = e.NewReadView(1); err != nil {
					b.Fatal(err)
				}
				if err := v.ReadPoints(func(r Reader) error {
					for range 8 {
						if err := get(r); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					b.Fatal(err)
				}
				v.Release()
			}
			i++
		}
	})
}
