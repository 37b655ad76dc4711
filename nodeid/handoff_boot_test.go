package nodeid_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// Issue 23.9: Adopt inherited whatever deadline a hand-off carried. One an
// hour away (read on another host, after a reboot, or simply wrong) kept the
// adopter valid, cut off from S3, while a spare took the ID. The inherited
// validity is capped at L - m from the send of the renewal that earned it:
// blackholed right after the adoption, the adopter fences itself within
// L - m of its last renewal, as any holder does.
func TestAdoptCapsAFarDeadlineAtWhatARenewalEarned(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		_, h := acquireAndHandOff(t, newRepo(t, srv, ""))
		h.ValidUntilBoottimeNs += int64(time.Hour)

		proxy := startProxy(t, srv)
		lost := newLossRecorder()
		cfg := fastConfig(t, "task-1", 1, lost)
		clk := clock.Real()
		cfg.Clock = clk
		adopter := newProvider(t, newRepo(t, srv, proxy.URL), cfg)
		if _, err := adopter.Adopt(context.Background(), h); err != nil {
			t.Fatalf("adopt: %v", err)
		}
		adopted := clk.Now() // after its first renewal was sent
		proxy.Set(faultproxy.Fault{Blackhole: true})
		if deadline, _ := adopter.Deadline(); deadline.Sub(adopted) > cfg.LeaseDuration-cfg.SafetyMargin {
			t.Fatalf("adopter valid for %v after the adoption, want <= L - m = %v", deadline.Sub(adopted).Round(time.Millisecond), cfg.LeaseDuration-cfg.SafetyMargin)
		}
		select {
		case err := <-lost.ch:
			if !errors.Is(err, nodeid.ErrLeaseLost) {
				t.Fatalf("loss: %v", err)
			}
		case <-time.After(3 * cfg.LeaseDuration):
			t.Fatalf("adopter cut off from S3 still valid (%v) %v after the adoption", adopter.Valid(), 3*cfg.LeaseDuration)
		}
	})
}

// A hand-off whose fields no renewal of this boot can have is refused: no
// renewal send time, or one in the future.
func TestAdoptRefusesAHandOffWithImpossibleSendTimes(t *testing.T) {
	srv := s3test.NewFake(t)
	repo := newRepo(t, srv, "")
	_, h := acquireAndHandOff(t, repo)
	for name, change := range map[string]func(*nodeid.Handoff){
		"no renewal send time":    func(h *nodeid.Handoff) { h.RenewalSentBoottimeNs = 0 },
		"renewal sent in an hour": func(h *nodeid.Handoff) { h.RenewalSentBoottimeNs += int64(time.Hour) },
		"pending write in an hour": func(h *nodeid.Handoff) {
			h.Pending = []nodeid.PendingWrite{{Nonce: "n", SentBoottimeNs: h.RenewalSentBoottimeNs + int64(time.Hour)}}
		},
	} {
		bad := h
		change(&bad)
		p := newProvider(t, repo, fastConfig(t, "task-1", 1, newLossRecorder()))
		if _, err := p.Adopt(context.Background(), bad); !errors.Is(err, nodeid.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// A hand-off made on another boot (another host, or before a reboot) is
// refused before anything is written: its CLOCK_BOOTTIME readings mean
// nothing here. So is one that records no boot ID.
func TestAdoptRefusesAHandOffFromAnotherBoot(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		repo := newRepo(t, srv, "")
		inst, h := acquireAndHandOff(t, repo)
		// As renew reads it: JSON, here written on another boot.
		var fields map[string]any
		b, _ := json.Marshal(h)
		if err := json.Unmarshal(b, &fields); err != nil {
			t.Fatal(err)
		}
		for name, bootID := range map[string]any{"another boot": "00000000-0000-0000-0000-000000000000", "no boot ID": nil} {
			if bootID == nil {
				delete(fields, "bootId")
			} else {
				fields["bootId"] = bootID
			}
			b, _ := json.Marshal(fields)
			var foreign nodeid.Handoff
			if err := json.Unmarshal(b, &foreign); err != nil {
				t.Fatal(err)
			}
			p := newProvider(t, repo, fastConfig(t, "task-1", 1, newLossRecorder()))
			if _, err := p.Adopt(context.Background(), foreign); !errors.Is(err, nodeid.ErrHandoffOtherBoot) || !errors.Is(err, nodeid.ErrInvalidConfig) {
				t.Errorf("%s: Adopt returned %v, want ErrHandoffOtherBoot (and ErrInvalidConfig)", name, err)
			}
			if rec, err := repo.Get(context.Background(), inst.ID); err != nil || rec.ETag != h.ETag {
				t.Fatalf("%s: the lease object changed (%v): the refused adoption wrote", name, err)
			}
		}
	})
}

// The same through the boot ID reader: handed off on boot A, adopted after a
// reboot (boot B), or where the boot ID cannot be read.
func TestAdoptAfterARebootIsRefused(t *testing.T) {
	srv := s3test.NewFake(t)
	repo := newRepo(t, srv, "")
	nodeid.SetBootIDForTest(t, "boot-a")
	_, h := acquireAndHandOff(t, repo)
	if h.BootID != "boot-a" {
		t.Fatalf("hand-off records boot %q, want boot-a", h.BootID)
	}
	for _, adopterBoot := range []string{"boot-b", ""} {
		nodeid.SetBootIDForTest(t, adopterBoot)
		p := newProvider(t, repo, fastConfig(t, "task-1", 1, newLossRecorder()))
		if _, err := p.Adopt(context.Background(), h); !errors.Is(err, nodeid.ErrHandoffOtherBoot) {
			t.Errorf("adopter on boot %q: %v, want ErrHandoffOtherBoot", adopterBoot, err)
		}
	}
	nodeid.SetBootIDForTest(t, "boot-a")
	p := newProvider(t, repo, fastConfig(t, "task-1", 1, nil))
	if _, err := p.Adopt(context.Background(), h); err != nil {
		t.Fatalf("adopter on the same boot: %v", err)
	}
}
