package nodeid

import (
	"context"
	"crypto/md5"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// This file is the simulated S3 of the deterministic simulation (sim_test.go):
// an in-memory bucket with S3's conditional-write semantics, whose requests
// travel through a scheduler that can delay, drop, duplicate or lose them.

// simObject is one lease object as S3 stores it.
type simObject struct {
	body         []byte
	meta         map[string]string
	etag         string
	lastModified time.Time // server clock, whole seconds
}

type simOp int

const (
	opList simOp = iota
	opGet
	opCreate
	opWrite
	opGetMarker
	opCreateMarker
)

func (o simOp) String() string {
	return [...]string{"list", "get", "create", "write", "get marker", "create marker"}[o]
}

// simRequest is one request in flight.
type simRequest struct {
	task   *simTask
	seq    uint64 // per task
	op     simOp
	id     int
	lease  Lease
	marker ClusterMarker
	etag   string
	reply  chan simReply
	// afterLoss: the task had already lost its lease when it sent this. A
	// write sent before the loss may still land after it; that is physics,
	// not a bug (the task no longer acts on it).
	afterLoss bool
}

type simReply struct {
	marker  ClusterMarker
	listing Listing
	record  Record
	etag    string
	err     error
}

// simRepo is one task's view of the bucket: each call becomes a request in
// the world's queue and waits for its answer or the caller's deadline.
type simRepo struct {
	w    *simWorld
	task *simTask
	mu   sync.Mutex
	seq  uint64
}

func (r *simRepo) call(ctx context.Context, req *simRequest) simReply {
	r.mu.Lock()
	r.seq++
	req.seq = r.seq
	r.mu.Unlock()
	req.task = r.task
	req.reply = make(chan simReply, 2) // duplicates answer too
	req.afterLoss = r.task.tenureOver()
	if r.task.crashed() {
		return simReply{err: &StorageError{Op: req.op.String(), Kind: ErrUnavailable, Err: fmt.Errorf("task crashed")}}
	}
	r.w.submit(req)
	select {
	case rep := <-req.reply:
		return rep
	case <-ctx.Done():
		return simReply{err: &StorageError{Op: req.op.String(), Kind: ErrUnavailable, Err: ctx.Err()}}
	}
}

func (r *simRepo) List(ctx context.Context) (Listing, error) {
	rep := r.call(ctx, &simRequest{op: opList})
	return rep.listing, rep.err
}

func (r *simRepo) Get(ctx context.Context, id int) (Record, error) {
	rep := r.call(ctx, &simRequest{op: opGet, id: id})
	return rep.record, rep.err
}

func (r *simRepo) Create(ctx context.Context, l Lease) (string, error) {
	rep := r.call(ctx, &simRequest{op: opCreate, id: l.Instance.ID, lease: l})
	return rep.etag, rep.err
}

func (r *simRepo) Write(ctx context.Context, l Lease, etag string) (string, error) {
	rep := r.call(ctx, &simRequest{op: opWrite, id: l.Instance.ID, lease: l, etag: etag})
	return rep.etag, rep.err
}

func (r *simRepo) Marker(ctx context.Context) (ClusterMarker, error) {
	rep := r.call(ctx, &simRequest{op: opGetMarker})
	return rep.marker, rep.err
}

func (r *simRepo) CreateMarker(ctx context.Context, m ClusterMarker) error {
	return r.call(ctx, &simRequest{op: opCreateMarker, marker: m}).err
}

// serve applies req to the bucket at server time now, as S3 would.
func (w *simWorld) serve(req *simRequest, now time.Time) simReply {
	date := now.Truncate(time.Second)
	key := LeaseKey("", req.id)
	fail := func(kind error, status int) simReply {
		return simReply{err: &StorageError{Op: req.op.String(), Key: key, Status: status, Kind: kind}}
	}
	switch req.op {
	case opList:
		l := Listing{ServerDate: date}
		for id, o := range w.objects {
			l.Slots = append(l.Slots, Slot{ID: id, ETag: o.etag, LastModified: o.lastModified, Size: int64(len(o.body))})
		}
		sort.Slice(l.Slots, func(i, j int) bool { return l.Slots[i].ID < l.Slots[j].ID })
		l.MarkerSeen = w.marker != nil
		return simReply{listing: l}
	case opGetMarker:
		if w.marker == nil {
			return fail(ErrNotFound, 404)
		}
		m, err := DecodeMarker(w.marker.body)
		m.LastModified = w.marker.lastModified
		return simReply{marker: m, err: err}
	case opCreateMarker:
		if w.marker != nil {
			return fail(ErrPreconditionFailed, 412)
		}
		body := req.marker.Encode()
		w.marker = &simObject{body: body, etag: w.etagOf(body), lastModified: now.Truncate(time.Second)}
		return simReply{etag: w.marker.etag}
	case opGet:
		o, ok := w.objects[req.id]
		if !ok {
			return fail(ErrNotFound, 404)
		}
		rec := Record{Slot: Slot{ID: req.id, ETag: o.etag, LastModified: o.lastModified, Size: int64(len(o.body))}, ServerDate: date}
		var err error
		rec.Lease, err = DecodeLease(req.id, o.body, o.meta)
		return simReply{record: rec, err: err}
	case opCreate:
		if _, ok := w.objects[req.id]; ok {
			return fail(ErrPreconditionFailed, 412)
		}
		return simReply{etag: w.store(req, now)}
	case opWrite:
		o, ok := w.objects[req.id]
		if !ok {
			return fail(ErrNotFound, 404)
		}
		if o.etag != req.etag {
			return fail(ErrPreconditionFailed, 412)
		}
		return simReply{etag: w.store(req, now)}
	}
	panic("unknown op")
}

// store writes req's lease and checks the version invariants on the way.
func (w *simWorld) store(req *simRequest, now time.Time) string {
	body, meta := req.lease.Encode()
	etag := w.etagOf(body)
	prev := w.objects[req.id]
	w.objects[req.id] = &simObject{body: body, meta: meta, etag: etag, lastModified: now.Truncate(time.Second)}
	l := req.lease
	// A "recreated-by:" lease stands for an unknown holder (a deleted object
	// recreated): it is not a tenure of the task that writes it.
	if l.Held() && req.task != nil && !strings.HasPrefix(l.TaskID, "recreated-by:") {
		w.checkVersion(req.task, l, prev)
		if req.afterLoss {
			w.violate("task %s sent a write of a held lease of node %d after its tenure ended (%v)", req.task.name, l.Instance.ID, req.task.provider.Err())
		}
	}
	return etag
}

func (w *simWorld) checkVersion(task *simTask, l Lease, prev *simObject) {
	id, v := l.Instance.ID, l.Instance.Version
	max, seen := w.maxVersion[id]
	prevTask := ""
	if prev != nil {
		prevTask = prev.meta[MetaTaskID]
	}
	newTenure := prevTask != l.TaskID
	switch {
	case seen && v < max && !w.deletedSince[id]:
		w.violate("node %d: version went down from %d to %d (task %s)", id, max, v, task.name)
	case seen && newTenure && v <= max && !w.deletedSince[id]:
		w.violate("node %d: task %s acquired version %d, not above the earlier %d", id, task.name, v, max)
	}
	if !seen || v > max {
		w.maxVersion[id] = v
	}
}

// outsideWrite overwrites or deletes a lease object from outside the
// protocol, as an operator or a chaos script would.
func (w *simWorld) outsideWrite(id int, now time.Time, del bool) string {
	o, ok := w.objects[id]
	if !ok {
		return "nothing to change"
	}
	if del {
		delete(w.objects, id)
		w.deletedSince[id] = true
		return fmt.Sprintf("deleted node %d", id)
	}
	v := Version(1)
	if l, err := DecodeLease(id, o.body, o.meta); err == nil && l.Instance.Version > 0 {
		v = l.Instance.Version
	}
	req := &simRequest{op: opWrite, id: id, lease: Lease{TaskID: "outsider", Instance: NodeInstance{ID: id, Version: v},
		Expires: now.Add(time.Hour), Duration: time.Second, Nonce: fmt.Sprint(w.etagSeq), Acquirable: true}}
	w.store(req, now)
	return fmt.Sprintf("overwrote node %d as outsider v%d", id, v)
}

// etagOf returns the ETag S3 gives a plain PUT of body: its MD5, so equal
// bodies get equal ETags. With opaqueETags every write gets a new ETag
// instead, as with SSE-KMS or multipart uploads.
func (w *simWorld) etagOf(body []byte) string {
	w.etagSeq++
	if w.p.opaqueETags {
		return fmt.Sprintf(`"%032x"`, w.etagSeq)
	}
	return fmt.Sprintf(`"%x"`, md5.Sum(body))
}

func describeReply(r simReply) string {
	if r.err != nil {
		s := r.err.Error()
		if i := strings.Index(s, ":"); i > 0 && len(s) > 40 {
			s = s[:40]
		}
		return "err " + s
	}
	return "ok " + r.etag
}
