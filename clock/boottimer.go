package clock

import (
	"encoding/binary"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// bootTimer is a one-shot timer on CLOCK_BOOTTIME (a timerfd), so that, like
// Real's Now, it counts the time a suspended machine slept: a watchdog due
// during a suspend fires as soon as the machine wakes. Go's own timers count
// on CLOCK_MONOTONIC, which stops during a suspend, and would fire only after
// the time that was left when the machine fell asleep.
//
// A goroutine waits on the timerfd through Go's poller while the timer
// exists; Stop closes the descriptor and ends it, and a later Reset opens a
// new one.
type bootTimer struct {
	c chan time.Time

	mu  sync.Mutex
	f   *os.File // nil after Stop
	now func() time.Time
}

func newBootTimer(d time.Duration, now func() time.Time) (*bootTimer, error) {
	t := &bootTimer{c: make(chan time.Time, 1), now: now}
	if err := t.arm(d); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *bootTimer) C() <-chan time.Time { return t.c }

// Stop disarms the timer; it reports whether the timer was armed.
func (t *bootTimer) Stop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	active := false
	if t.f != nil {
		active = armed(t.f)
		t.f.Close()
		t.f = nil
	}
	t.drain()
	return active
}

// Reset re-arms the timer to fire after d; a value of an earlier arming is
// never delivered after Reset returns.
func (t *bootTimer) Reset(d time.Duration) {
	if err := t.arm(d); err != nil {
		// Creating a timerfd fails only when the process is out of file
		// descriptors; firing at once is the safe failure for a watchdog.
		t.mu.Lock()
		t.drain()
		t.c <- t.now()
		t.mu.Unlock()
	}
}

func (t *bootTimer) drain() {
	select {
	case <-t.c:
	default:
	}
}

func (t *bootTimer) arm(d time.Duration) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.drain()
	if t.f == nil {
		fd, err := unix.TimerfdCreate(unix.CLOCK_BOOTTIME, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
		if err != nil {
			return err
		}
		t.f = os.NewFile(uintptr(fd), "timerfd") // non-blocking: read through the poller
		go t.wait(t.f)
	}
	d = max(d, time.Nanosecond) // a zero it_value would disarm the timer
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	return control(t.f, func(fd int) error { return unix.TimerfdSettime(fd, 0, &spec, nil) })
}

// control runs op on f's descriptor without f.Fd(), which would switch the
// descriptor to blocking mode and take it out of the poller.
func control(f *os.File, op func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	if err := rc.Control(func(fd uintptr) { opErr = op(int(fd)) }); err != nil {
		return err
	}
	return opErr
}

// armed reports whether the timer of f has yet to expire (a one-shot timer
// that expired reads as disarmed).
func armed(f *os.File) bool {
	var cur unix.ItimerSpec
	err := control(f, func(fd int) error { return unix.TimerfdGettime(fd, &cur) })
	return err == nil && (cur.Value.Sec != 0 || cur.Value.Nsec != 0)
}

// wait delivers the expirations of f until f is closed. An expiration read
// while Reset re-armed the timer belongs to the earlier arming if the timer
// is armed again by the time the lock is held: it is dropped, and the new
// arming delivers its own.
func (t *bootTimer) wait(f *os.File) {
	var buf [8]byte
	for {
		if _, err := f.Read(buf[:]); err != nil {
			return // closed by Stop
		}
		if binary.NativeEndian.Uint64(buf[:]) == 0 {
			continue
		}
		t.mu.Lock()
		if t.f == f && !armed(f) {
			select {
			case t.c <- t.now():
			default:
			}
		}
		t.mu.Unlock()
	}
}
