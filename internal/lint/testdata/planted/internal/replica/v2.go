package replica

import (
	mrand "math/rand/v2"
	clock "time"
)

func renamed() {
	_ = mrand.IntN(3)     // want: core-rand
	_ = mrand.N(10)       // want: core-rand
	<-clock.After(0)      // want: core-clock
	_ = clock.Tick(1)     // want: core-clock
	_ = clock.Duration(1) // a type: fine
	_ = mrand.New(mrand.NewPCG(1, 2))
}
