// Package poll waits for a condition that nothing signals, such as another
// process exiting or a server's state changing, by checking it at an
// interval. The chaos suite, the benchmarks, the demo and tests share it so
// that every such wait is bounded and says what it waited for.
package poll

import (
	"context"
	"fmt"
	"time"
)

// Until calls cond every interval until it returns true. It fails when
// timeout passes first (0: no bound but ctx) or when ctx ends; both errors
// name what it waited for, and the second wraps ctx.Err().
func Until(ctx context.Context, timeout, every time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if timeout > 0 && time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(every):
		}
	}
	return nil
}
