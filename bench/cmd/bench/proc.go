package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nodeid/nodeid/internal/poll"
)

// logLine is one JSON log line of nodeid-init (NODEID_LOG_FORMAT=json).
type logLine struct {
	Time    time.Time // the line's own timestamp: when nodeid-init logged it
	Seen    time.Time // when the benchmark read it
	Msg     string
	Fields  map[string]any
	Raw     string
	Numeric bool
}

// proc is one nodeid-init process whose log is watched line by line. The
// times of the scenarios are taken from the lines' own timestamps (same
// host, same clock), so a busy benchmark goroutine does not inflate them.
type proc struct {
	name string
	cmd  *exec.Cmd

	mu    sync.Mutex
	lines []logLine
	cond  chan struct{} // closed and replaced on every new line or exit

	exited   chan struct{}
	exitCode int
	exitTime time.Time
}

// startProc starts bin with args and env, logging JSON to a pipe.
func startProc(name, bin string, env []string, args ...string) (*proc, error) {
	p := &proc{name: name, cond: make(chan struct{}), exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	// nodeid-init kills its own child by Pdeathsig; this makes sure the
	// supervisors themselves never outlive the benchmark.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go p.read(pr)
	go func() {
		err := p.cmd.Wait()
		now := time.Now()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			code = -1
		}
		pw.Close()
		p.mu.Lock()
		p.exitCode, p.exitTime = code, now
		close(p.exited)
		p.notifyLocked()
		p.mu.Unlock()
	}()
	return p, nil
}

func (p *proc) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		raw := sc.Text()
		l := logLine{Seen: time.Now(), Raw: raw}
		var m map[string]any
		if json.Unmarshal([]byte(raw), &m) == nil {
			l.Fields = m
			l.Msg, _ = m["msg"].(string)
			if ts, ok := m["time"].(string); ok {
				if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
					l.Time = t
				}
			}
		}
		if l.Time.IsZero() {
			l.Time = l.Seen
		}
		p.mu.Lock()
		p.lines = append(p.lines, l)
		p.notifyLocked()
		p.mu.Unlock()
	}
	io.Copy(io.Discard, r)
}

func (p *proc) notifyLocked() {
	close(p.cond)
	p.cond = make(chan struct{})
}

// waitLog waits for the first line with msg logged at or after since.
func (p *proc) waitLog(msg string, since time.Time, timeout time.Duration) (logLine, error) {
	deadline := time.After(timeout)
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			if l.Msg == msg && !l.Time.Before(since) {
				p.mu.Unlock()
				return l, nil
			}
		}
		ch := p.cond
		exited := p.isExited()
		p.mu.Unlock()
		if exited {
			return logLine{}, fmt.Errorf("%s exited (code %d) before logging %q:\n%s", p.name, p.exitCode, msg, p.tail(15))
		}
		select {
		case <-ch:
		case <-deadline:
			return logLine{}, fmt.Errorf("%s: no %q after %v:\n%s", p.name, msg, timeout, p.tail(15))
		}
	}
}

func (p *proc) isExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// wait waits for the process to exit and returns its code and when the
// benchmark saw it exit.
func (p *proc) wait(timeout time.Duration) (int, time.Time, error) {
	select {
	case <-p.exited:
		return p.exitCode, p.exitTime, nil
	case <-time.After(timeout):
		return 0, time.Time{}, fmt.Errorf("%s still running after %v:\n%s", p.name, timeout, p.tail(15))
	}
}

// waitLoss waits for the holder p to log "lease lost" at or after since,
// then to exit, and returns that line, its exit code and when it exited.
func (p *proc) waitLoss(since time.Time) (lost logLine, code int, exited time.Time, err error) {
	if lost, err = p.waitLog("lease lost", since, 60*time.Second); err != nil {
		return logLine{}, 0, time.Time{}, err
	}
	code, exited, err = p.wait(30 * time.Second)
	return lost, code, exited, err
}

// stop ends the process, politely first; used for cleanup.
func (p *proc) stop() {
	if p.isExited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// childPID is the pid of the supervised command, from "command started".
func (p *proc) childPID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		if l.Msg == "command started" {
			if f, ok := l.Fields["pid"].(float64); ok {
				return int(f)
			}
		}
	}
	return 0
}

func (p *proc) tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, l := range p.lines[max(0, len(p.lines)-n):] {
		b.WriteString("  " + l.Raw + "\n")
	}
	return b.String()
}

// gone waits up to timeout for pid to disappear (or become a zombie).
func gone(pid int, timeout time.Duration) bool {
	return poll.Until(context.Background(), timeout, 10*time.Millisecond, fmt.Sprintf("pid %d to exit", pid), func() bool { return exitedOrZombie(pid) }) == nil
}

// exitedOrZombie says whether pid is gone or a zombie.
func exitedOrZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// Field 3, after the command in parentheses, is the state.
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}
