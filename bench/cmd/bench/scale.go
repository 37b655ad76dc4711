package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/nodeid/nodeid/bench"
	"github.com/nodeid/nodeid/nodeid"
)

// The scale scenario: N providers in this process on one in-process
// gofakes3, in steady state, counted by operation. Counts per node per
// lease duration do not depend on L, so a short L stands in for an
// accelerated clock; the per-hour and per-second figures are for the
// default L = 15 s.

// scaleRep is one steady-state measurement of N nodes.
type scaleRep struct {
	N        int
	Store    string // "gofakes3" or "memory"
	Legacy   bool   // the refresh of before issue 25: every peer read each time
	L        time.Duration
	Interval time.Duration // the refresh interval in use
	Window   time.Duration
	PerNodeL map[string]float64 // requests per node per L by kind
	Settle   time.Duration      // from the start until every table was complete
	TableOK  bool               // every table complete and right at the end
}

// legacyRepo hides the tenure methods: the provider falls back to reading
// every peer at each refresh, as before issue 25.
type legacyRepo struct{ nodeid.Repository }

// scale measures n providers for window after every table is complete, on
// gofakes3 over HTTP or on the in-memory bucket (memBucket).
func scale(ctx context.Context, n int, lease time.Duration, legacy bool, store string) (scaleRep, error) {
	var (
		repo   nodeid.Repository
		counts func() map[string]int
	)
	if store == "memory" {
		b := newMemBucket()
		repo, counts = b, b.snapshot
	} else {
		r, st, stop, err := fakeS3Repo(ctx)
		if err != nil {
			return scaleRep{}, err
		}
		defer stop()
		repo = r
		counts = func() map[string]int { n, _, _ := st.snapshot(); return n }
	}
	if legacy {
		repo = legacyRepo{repo}
	}
	return scaleOn(ctx, repo, counts, n, lease, legacy, store)
}

// fakeS3Repo starts gofakes3 in this process and returns a repository on
// it whose client counts requests by operation.
func fakeS3Repo(ctx context.Context) (*nodeid.S3Repository, *opStats, func(), error) {
	h := gofakes3.New(s3mem.New(), gofakes3.WithoutVersioning()).Server()
	hs := httptest.NewServer(h)
	st := newOpStats()
	hc := &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 3 * time.Second}).DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     30 * time.Second,
	}}
	client, err := nodeid.NewS3Client(ctx, nodeid.S3Config{Endpoint: hs.URL, Region: "us-east-1", PathStyle: true, AccessKey: "k", SecretKey: "s"})
	if err != nil {
		hs.Close()
		return nil, nil, nil, err
	}
	client = s3.New(client.Options(), func(o *s3.Options) { o.HTTPClient = opClient{inner: hc, st: st} })
	bucket := "scale"
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		hs.Close()
		return nil, nil, nil, err
	}
	repo, err := nodeid.NewS3Repository(client, bucket, "", 0)
	if err != nil {
		hs.Close()
		return nil, nil, nil, err
	}
	return repo, st, hs.Close, nil
}

func scaleOn(ctx context.Context, repo nodeid.Repository, counts func() map[string]int, n int, lease time.Duration, legacy bool, store string) (scaleRep, error) {
	if err := nodeid.Initialize(ctx, repo, n, "bench", lease); err != nil {
		return scaleRep{}, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	started := time.Now()
	ps := make([]*nodeid.Provider, n)
	addrs := map[int]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		p, err := nodeid.NewProvider(repo, nodeid.Config{
			TaskID: fmt.Sprintf("task-%d", i), ClusterSize: n, LeaseDuration: lease,
			Address: fmt.Sprintf("10.%d.%d.%d:26502", i/65536, i/256%256, i%256),
			Logger:  quiet, OnLost: func(err error) { errs <- fmt.Errorf("task-%d lost its lease: %w", i, err) },
		})
		if err != nil {
			return scaleRep{}, err
		}
		ps[i] = p
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, 10*time.Minute)
			defer cancel()
			inst, err := p.Acquire(actx)
			if err != nil {
				errs <- fmt.Errorf("task-%d: %w", i, err)
				return
			}
			mu.Lock()
			addrs[inst.ID] = fmt.Sprintf("10.%d.%d.%d:26502", i/65536, i/256%256, i%256)
			mu.Unlock()
		}()
	}
	defer func() {
		var cw sync.WaitGroup
		for _, p := range ps {
			cw.Add(1)
			go func() {
				defer cw.Done()
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = p.Close(cctx)
			}()
		}
		cw.Wait()
	}()
	acquired := make(chan struct{})
	go func() { wg.Wait(); close(acquired) }()
	for waiting := true; waiting; {
		select {
		case <-acquired:
			waiting = false
		case err := <-errs:
			return scaleRep{}, err
		case <-time.After(10 * time.Second):
			mu.Lock()
			progress("  %d of %d acquired", len(addrs), n)
			mu.Unlock()
		}
	}
	complete := func() bool {
		for _, p := range ps {
			peers := p.Peers()
			if len(peers) != n {
				return false
			}
			for _, peer := range peers {
				if peer.State != nodeid.PeerHeld || peer.Address != addrs[peer.ID] {
					return false
				}
			}
		}
		return true
	}
	interval := nodeid.Config{ClusterSize: n, LeaseDuration: lease}.WithDefaults().MappingsRefreshInterval
	for !complete() {
		if time.Since(started) > 10*time.Minute {
			return scaleRep{}, fmt.Errorf("the peer tables of %d nodes were not complete after 10 min", n)
		}
		select {
		case err := <-errs:
			return scaleRep{}, err
		case <-time.After(500 * time.Millisecond):
		}
	}
	settle := time.Since(started)
	window := max(4*lease, 3*interval)
	before := counts()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return scaleRep{}, ctx.Err()
	case err := <-errs:
		return scaleRep{}, err
	}
	after := counts()
	rep := scaleRep{N: n, Store: store, Legacy: legacy, L: lease, Interval: interval, Window: window, Settle: settle, PerNodeL: map[string]float64{}}
	perL := float64(window) / float64(lease)
	for k, v := range after {
		rep.PerNodeL[k] = float64(v-before[k]) / float64(n) / perL
	}
	rep.TableOK = complete()
	select {
	case err := <-errs:
		return scaleRep{}, err
	default:
	}
	return rep, nil
}

// scaleAll runs the scale scenario for each size on gofakes3 (sizes up to
// maxHTTP) and on the in-memory bucket, and the refresh of before issue 25
// for legacySizes.
func scaleAll(ctx context.Context, sizes []int, legacySizes []int, lease time.Duration) ([]scaleRep, error) {
	const maxHTTP = 100
	var out []scaleRep
	for _, store := range []string{"gofakes3", "memory"} {
		for _, legacy := range []bool{false, true} {
			for _, n := range sizes {
				if legacy && !containsInt(legacySizes, n) || store == "gofakes3" && n > maxHTTP {
					continue
				}
				l := lease
				if n > 100 {
					l = max(lease, nodeid.DefaultLeaseDuration) // a thousand providers on 2 cores need the room
				}
				progress("scale: N = %d on %s%s, L = %v", n, store, map[bool]string{true: " (refresh before issue 25)"}[legacy], l)
				rep, err := scale(ctx, n, l, legacy, store)
				if err != nil {
					return nil, err
				}
				progress("  %.1f requests per node per L (settled in %v)", total(rep.PerNodeL), rep.Settle.Round(time.Second))
				out = append(out, rep)
			}
		}
	}
	return out, nil
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func total(m map[string]float64) float64 {
	s := 0.0
	for _, v := range m {
		s += v
	}
	return s
}

// scaleSection renders the scale scenario.
func (r *report) scaleSection(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("## Scale: steady state of N nodes\n\n")
	w("N providers in one process, every ID held, measured once every peer table was complete, for\n")
	w("max(4 L, 3 I) (I the refresh interval in use); a short L (column L) stands in for an accelerated clock\n")
	w("(counts per L do not depend on L). *gofakes3*: over HTTP, counted by the client, retries included; *memory*: an\n")
	w("in-memory bucket with S3's conditional writes, ETags, whole-second clocks and 1,000-key pages, counted as\n")
	w("S3 bills (a LIST per page): a thousand providers over HTTP on this machine starve each other's renewals.\n")
	w("*before* is the refresh of before issue 25 (a GET of every peer each time), measured the same way.\n\n")
	w("| N | store | refresh | L | I | PUT / node / L | LIST / node / L | GET / node / L | DELETE / node / L | all / node / L | per node-hour at L = 15 s: PUT / LIST / GET / all | $ / node-month | tables complete |\n")
	w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	byN := map[int]float64{}
	for _, s := range r.scale {
		name := "cache"
		if s.Legacy {
			name = "before"
		} else if s.Store == "memory" {
			byN[s.N] = total(s.PerNodeL)
		}
		put, list, get, del := s.PerNodeL["PUT"], s.PerNodeL["LIST"], s.PerNodeL["GET"]+s.PerNodeL["HEAD"], s.PerNodeL["DELETE"]
		hour := 3600 / defL.Seconds()
		month := hour * hoursMonth * ((put+list+del)*pricePUT + get*priceGET) / 1000
		w("| %d | %s | %s | %v | %.0f L | %.2f | %.2f | %.2f | %.3f | %.2f | %.0f / %.0f / %.0f / %.0f | %.2f | %v |\n", s.N, s.Store, name, s.L, s.Interval.Seconds()/s.L.Seconds(), put, list, get, del, total(s.PerNodeL),
			put*hour, list*hour, get*hour, total(s.PerNodeL)*hour, month, s.TableOK)
	}
	w("\nDELETE is the collection of a node's own older tenure objects.\n\n")
	if a, c := byN[10], byN[100]; a > 0 && c > 0 {
		ratio := bench.Ratio(c, a)
		w("Per-node ratio N = 100 / N = 10 (memory): **%.2f**.\n\n", ratio)
		r.verdict(ratio <= 1.25, "a node's steady-state requests at N = 100 at most 1.25x those at N = 10 (%.2f)", ratio)
	}
	w("The whole cluster at the default timings (L = 15 s), against S3's per-prefix limits (3,500\n")
	w("PUT/COPY/POST/DELETE/LIST and 5,500 GET/HEAD per second; the goal is 10 %% of them):\n\n")
	w("| N | PUT + LIST + DELETE / s | %% of 3,500 | GET / s | %% of 5,500 | $ / month for the cluster |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, s := range r.scale {
		if s.Legacy || s.Store != "memory" {
			continue
		}
		perS := float64(s.N) / defL.Seconds()
		pl := (s.PerNodeL["PUT"] + s.PerNodeL["LIST"] + s.PerNodeL["DELETE"]) * perS
		g := (s.PerNodeL["GET"] + s.PerNodeL["HEAD"]) * perS
		month := 3600 * hoursMonth * (pl*pricePUT + g*priceGET) / 1000
		w("| %d | %.0f | %.1f %% | %.1f | %.2f %% | %.0f |\n", s.N, pl, 100*pl/3500, g, 100*g/5500, month)
		if s.N == 1000 {
			r.verdict(pl <= 350 && g <= 550, "N = 1,000 at default timings within 10 %% of the per-prefix limits (%.0f PUT+LIST/s, %.0f GET/s)", pl, g)
		}
	}
	w("\nPrices: PUT and LIST $0.005 per 1,000, GET $0.0004 per 1,000 (us-east-1), %d hours a month.\n\n", hoursMonth)
}
