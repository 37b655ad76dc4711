package nodeid_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/clock/clocktest"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// A spare that waits says so once, then, at info, every minute that it
// still waits, for how long and how many IDs it found held: a spare
// waiting for days shows it is alive. Each pass is not logged at info.
func TestWaitingSpareLogsProgressEveryMinute(t *testing.T) {
	server := clocktest.NewFake(epoch) // frozen: the holder's lease never expires by S3's clock
	srv := s3test.NewFake(t, s3test.WithServerClock(server.Now))
	repo := newRepo(t, srv, "")
	ctx := context.Background()
	if err := nodeid.Initialize(ctx, repo, 1, "setup", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	rec, err := repo.Get(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Held for an hour by a task that renews as far as the spare can tell.
	held := nodeid.Lease{TaskID: "holder", Instance: nodeid.NodeInstance{ID: 0, Version: 1},
		Expires: epoch.Add(time.Hour), Duration: time.Hour, Nonce: "n1", Acquirable: true}
	if _, err := repo.Write(ctx, held, rec.ETag); err != nil {
		t.Fatal(err)
	}

	clk := clocktest.NewFake(epoch)
	cfg := fakeClockConfig(t, "spare", clk)
	cfg.PollInterval = 10 * time.Second
	var buf lockedBuffer
	cfg.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p := newProvider(t, repo, cfg)
	res := acquireAsync(p)
	for range 15 { // 150 s of waiting at most, in polls of at most 10 s
		expectWaiting(t, clk, res, "held for an hour")
		clk.Advance(cfg.PollInterval)
	}
	expectWaiting(t, clk, res, "held for an hour")
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	<-res

	var waiting, progress []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		switch rec["msg"] {
		case "no node id free, waiting":
			waiting = append(waiting, rec)
		case "still waiting for a node id":
			progress = append(progress, rec)
		}
	}
	if len(waiting) != 1 || waiting[0]["held_ids"] != 1.0 {
		t.Fatalf("want one \"no node id free, waiting\" line with held_ids 1:\n%s", buf.String())
	}
	// About 150 s of waiting: progress after 60 s and 120 s, give or take a
	// poll (polls are 5 to 10 s apart).
	if len(progress) != 2 {
		t.Fatalf("%d progress lines in about 150 s of waiting, want 2 (one a minute):\n%s", len(progress), buf.String())
	}
	for i, rec := range progress {
		w, ok := rec["waited_seconds"].(float64)
		if !ok || w < float64(60*(i+1)) || w > float64(60*(i+1)+10) {
			t.Errorf("progress line %d: waited_seconds %v, want a number from %d to %d", i, rec["waited_seconds"], 60*(i+1), 60*(i+1)+10)
		}
		if rec["held_ids"] != 1.0 || rec["cluster_size"] != 1.0 {
			t.Errorf("progress line %d: held_ids %v, cluster_size %v; want 1 and 1", i, rec["held_ids"], rec["cluster_size"])
		}
	}
	if n := strings.Count(buf.String(), "\n"); n > 3 {
		t.Errorf("%d info lines while waiting, want the first and the progress lines only:\n%s", n, buf.String())
	}
}
