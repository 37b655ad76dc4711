package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nodeid/nodeid/nodeid"
)

// metrics are the Prometheus series of one task, fed by provider events.
type metrics struct {
	reg             *prometheus.Registry
	held            prometheus.Gauge
	nodeID          prometheus.Gauge
	version         prometheus.Gauge
	nodeVersion     *prometheus.GaugeVec
	renewals        prometheus.Counter
	renewalFailures prometheus.Counter
	renewLatency    prometheus.Histogram
	acquireAttempts prometheus.Counter
	acquireSeconds  prometheus.Gauge
	transitions     *prometheus.CounterVec
	selfFences      prometheus.Counter
	noAddress       prometheus.Gauge
	waiting         prometheus.Gauge
	clusterSize     prometheus.Gauge

	leaseFileFailures prometheus.Counter
	dataMountPoints   prometheus.Gauge
}

// Metric names follow Prometheus conventions: nodeid_ prefix, base units,
// _total for counters, one stem per concept (renewal_*), label values in
// snake_case. docs/cli.md lists them; docs/prometheus-alerts.yml uses them.
func newMetrics() *metrics {
	m := &metrics{
		reg:             prometheus.NewRegistry(),
		held:            prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeid_lease_held", Help: "1 while this task holds a valid lease."}),
		nodeID:          prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeid_node_id", Help: "Node ID held (-1 when none)."}),
		version:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeid_lease_version", Help: "Version of the lease held: the fencing token (not the build; see nodeid_build_info)."}),
		renewals:        prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeid_renewals_total", Help: "Successful renewals."}),
		renewalFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeid_renewal_failures_total", Help: "Failed renewal attempts."}),
		renewLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nodeid_renewal_duration_seconds", Help: "Round trip of successful renewals.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}}),
		acquireAttempts: prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeid_acquire_attempts_total", Help: "Conditional writes sent to take a node ID."}),
		acquireSeconds:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeid_acquire_duration_seconds", Help: "Time the last acquisition took."}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nodeid_lease_transitions_total",
			Help: "Lease state changes by new state (held, lost, released, handed_off); alarm on a high rate of lost (flapping)."}, []string{"to"}),
		selfFences: prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeid_self_fences_total", Help: "Losses by the self-fence deadline."}),
		noAddress: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeid_peers_without_address",
			Help: "Node IDs of the cluster (not scaled down) whose address is unknown in the last peers table: not held, expired, or held without a valid address."}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeid_waiting",
			Help: "1 while this task waits for a node ID (a hot spare); sum over tasks = tasks waiting."}),
		clusterSize: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeid_cluster_size", Help: "This task's cluster size N (node IDs 0..N-1)."}),
	}
	// Labelled by node ID so that a dashboard can count holders and follow
	// the version per ID across tasks (each task is a new instance); one
	// series at most, none while nothing is held.
	m.nodeVersion = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nodeid_node_lease_version",
		Help: "Version of the lease held, labelled with the node ID held; no series while none is held."}, []string{"node_id"})
	m.leaseFileFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeid_lease_file_write_failures_total",
		Help: "Failed writes of the lease file; two in a row while held end the tenure like a loss."})
	m.dataMountPoints = prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeid_datadir_mount_points",
		Help: "Old version directories the last data-directory preparation left in place because another file system is mounted in or on them."})
	m.nodeID.Set(-1)
	v, c := buildVersion()
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeid_build_info", Help: "Always 1; the labels say which nodeid-init runs.",
		ConstLabels: prometheus.Labels{"version": v, "commit": c, "goversion": runtime.Version()}})
	buildInfo.Set(1)
	m.reg.MustRegister(buildInfo, m.held, m.nodeID, m.version, m.nodeVersion, m.renewals, m.renewalFailures, m.renewLatency,
		m.acquireAttempts, m.acquireSeconds, m.transitions, m.selfFences, m.noAddress, m.leaseFileFailures,
		m.waiting, m.clusterSize, m.dataMountPoints,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, to := range transitionLabels {
		m.transitions.WithLabelValues(to)
	}
	return m
}

// transitionLabels are the values of nodeid_lease_transitions_total{to}.
var transitionLabels = []string{"held", "lost", "released", "handed_off"}

func (m *metrics) observe(e nodeid.Event) {
	switch e.Kind {
	case nodeid.EventAcquireAttempt:
		m.acquireAttempts.Inc()
	case nodeid.EventAcquired:
		m.waiting.Set(0)
		m.held.Set(1)
		m.nodeID.Set(float64(e.Instance.ID))
		m.version.Set(float64(e.Instance.Version))
		m.nodeVersion.Reset()
		m.nodeVersion.WithLabelValues(strconv.Itoa(e.Instance.ID)).Set(float64(e.Instance.Version))
		m.acquireSeconds.Set(e.Latency.Seconds())
		m.transitions.WithLabelValues("held").Inc()
	case nodeid.EventRenewed:
		m.renewals.Inc()
		m.renewLatency.Observe(e.Latency.Seconds())
	case nodeid.EventRenewalFailed:
		m.renewalFailures.Inc()
	case nodeid.EventLost:
		m.held.Set(0)
		m.nodeVersion.Reset()
		m.transitions.WithLabelValues("lost").Inc()
		if e.SelfFence {
			m.selfFences.Inc()
		}
	case nodeid.EventReleased:
		m.held.Set(0)
		m.nodeVersion.Reset()
		m.transitions.WithLabelValues("released").Inc()
	case nodeid.EventHandedOff:
		m.held.Set(0)
		m.nodeVersion.Reset()
		m.transitions.WithLabelValues("handed_off").Inc()
	}
}

// registerThrottled exports how many S3 answers were 503 SlowDown (or 429),
// read at each scrape from the repository's count.
func registerThrottled(reg *prometheus.Registry, n func() int64) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "nodeid_s3_throttled_total",
		Help: "S3 answers that were 503 SlowDown or 429, retries included."}, func() float64 { return float64(n()) }))
}

// registerFenceLeft exports the time left before the self-fence deadline,
// read at each scrape: a gauge set on renewal would be up to R stale, which
// is the part that matters when renewals fail.
func registerFenceLeft(reg *prometheus.Registry, left func() (time.Duration, bool)) {
	reg.MustRegister(fenceLeftCollector{left: left, desc: prometheus.NewDesc("nodeid_self_fence_remaining_seconds",
		"Time left before the self-fence deadline of the lease held; no series while none is held.", nil, nil)})
}

type fenceLeftCollector struct {
	desc *prometheus.Desc
	left func() (time.Duration, bool)
}

func (c fenceLeftCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c fenceLeftCollector) Collect(ch chan<- prometheus.Metric) {
	if d, held := c.left(); held {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, max(d, 0).Seconds())
	}
}

// setPeers updates the series derived from a peers table.
func (m *metrics) setPeers(peers []nodeid.Peer) {
	n := 0
	for _, p := range peers {
		if p.State != nodeid.PeerUnusable && p.Address == "" {
			n++
		}
	}
	m.noAddress.Set(float64(n))
}

// Limits of the metrics server: a scraper or health checker needs one or
// two connections; more must not take the file descriptors the lease file
// needs (each write opens one).
const (
	metricsMaxConns     = 16
	metricsReadTimeout  = 5 * time.Second
	metricsWriteTimeout = 10 * time.Second
	metricsIdleTimeout  = 30 * time.Second
)

// serveHealth serves /healthz (healthy: session.healthy), /readyz (ready:
// session.ready) and /metrics on addr until ctx ends. It listens before
// returning, so a bad address is reported at start.
func serveHealth(ctx context.Context, addr string, m *metrics, healthy, ready func() bool, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return usagef("metrics address %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	status := func(ok bool, w http.ResponseWriter) {
		if ok {
			w.WriteHeader(http.StatusOK)
			w.Write([]byte("ok\n"))
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("not ok\n"))
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { status(healthy(), w) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) { status(ready(), w) })
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: metricsReadTimeout, ReadTimeout: metricsReadTimeout,
		WriteTimeout: metricsWriteTimeout, IdleTimeout: metricsIdleTimeout}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(limitListener(ln, metricsMaxConns)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving health and metrics", "addr", ln.Addr().String())
	return nil
}

// limitListener accepts at most n connections at a time and closes any
// beyond that at once, so that they hold no file descriptor for longer than
// an accept (rather than queueing: a flood would then fill the backlog and
// starve the health checker just the same, but not our file descriptors).
func limitListener(ln net.Listener, n int) net.Listener {
	return &limitedListener{Listener: ln, sem: make(chan struct{}, n)}
}

type limitedListener struct {
	net.Listener
	sem chan struct{}
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.sem <- struct{}{}:
			return &limitedConn{Conn: c, release: func() { <-l.sem }}, nil
		default:
			c.Close()
		}
	}
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
