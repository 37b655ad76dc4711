package nodeid

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"
)

// This file is the simulated S3 of the deterministic simulation (sim_test.go):
// an in-memory bucket with S3's conditional-write semantics, whose requests
// travel through a scheduler that can delay, drop, duplicate or lose them,
// and whose listings may lag. It also checks the version promise on every
// write (checkVersion).

// simObject is one lease object as S3 stores it.
type simObject struct {
	body         []byte
	meta         map[string]string
	etag         string
	lastModified time.Time // server clock, whole seconds
	lease        Lease     // decoded from body and meta
	decoded      bool
	// byCamunda: written by a Camunda broker (simcamunda_test.go).
	byCamunda bool
}

// sameState reports whether two writes left the same content: If-Match
// cannot tell them apart, and need not.
func sameState(a, b *simObject) bool {
	return bytes.Equal(a.body, b.body) && maps.Equal(a.meta, b.meta)
}

type simOp int

const (
	opList simOp = iota
	opGet
	opCreate
	opWrite
	opGetMarker
	opCreateMarker
	opCreateTenure // a tenure object (tenure.go), If-None-Match: *
	opDeleteTenure
	opHeadHint  // the release hint (hint.go)
	opWriteHint // If-Match etag, or a create when etag is ""
	// Local steps of a task, not S3 requests: no network, no faults.
	opPrepare   // prepare the tenure's data directory
	opStopGroup // graceful stop: stop the process group before releasing
)

func (o simOp) String() string {
	return [...]string{"list", "get", "create", "write", "get marker", "create marker", "create tenure", "delete tenure", "head hint", "write hint", "prepare", "stop group"}[o]
}

func (o simOp) local() bool { return o >= opPrepare }

// simRequest is one request in flight.
type simRequest struct {
	task     *simTask
	seq      uint64 // per task
	op       simOp
	id       int
	lease    Lease
	marker   ClusterMarker
	etag     string
	tenure   TenureObject // opCreateTenure, opDeleteTenure
	inst     NodeInstance // opPrepare
	graceful bool         // opPrepare: the predecessor released
	staleBy  time.Duration
	after    string // opList: the continuation token, the last key of the page before
	reply    chan simReply
	// afterLoss: the task had already lost its lease when it sent this. A
	// write sent before the loss may still land after it; that is physics,
	// not a bug (the task no longer acts on it).
	afterLoss bool
	// raw: a Camunda broker's request (simcamunda_test.go): a write stores
	// body and meta as they are, a read answers with them.
	raw  bool
	body []byte
	meta map[string]string
	// abaOnCamunda: this write's If-Match landed, through an ETag shared by
	// two of Camunda's empty bodies, on a later state than the one read.
	abaOnCamunda bool
}

type simReply struct {
	marker  ClusterMarker
	listing Listing
	// opList: more keys follow; next is the continuation token.
	truncated bool
	next      string
	record    Record
	etag      string
	err       error
	shows     map[string]*simObject // ETag -> the write the answer shows under it
	body      []byte                // a raw read: the object as S3 returns it
	meta      map[string]string
}

// simRepo is one task's view of the bucket: each call becomes a request in
// the world's queue and waits for its answer or the caller's deadline.
type simRepo struct {
	w    *simWorld
	task *simTask
	mu   sync.Mutex
	seq  uint64
}

// nextSeq numbers the task's next request or posted effect.
func (r *simRepo) nextSeq() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	return r.seq
}

func (r *simRepo) call(ctx context.Context, req *simRequest) simReply {
	req.seq = r.nextSeq()
	req.task = r.task
	req.reply = make(chan simReply, 2) // duplicates answer too
	req.afterLoss = r.task.tenureOver()
	if r.task.crashed() {
		return simReply{err: &StorageError{Op: req.op.String(), Kind: ErrUnavailable, Err: fmt.Errorf("task crashed")}}
	}
	if err := ctx.Err(); err != nil { // an HTTP client sends nothing on a done context
		return simReply{err: &StorageError{Op: req.op.String(), Kind: ErrUnavailable, Err: err}}
	}
	r.w.submit(req)
	select {
	case rep := <-req.reply:
		r.task.mu.Lock()
		if r.task.seen == nil {
			r.task.seen = map[string]*simObject{}
		}
		maps.Copy(r.task.seen, rep.shows)
		r.task.mu.Unlock()
		return rep
	case <-ctx.Done():
		return simReply{err: &StorageError{Op: req.op.String(), Kind: ErrUnavailable, Err: ctx.Err()}}
	}
}

// List pages through the bucket as S3Repository does: each page is a
// request of its own (with its own delay, faults and staleness), continuing
// after the last key of the page before, so a listing is no snapshot.
func (r *simRepo) List(ctx context.Context) (Listing, error) {
	var l Listing
	after := ""
	for page := 0; ; page++ {
		rep := r.call(ctx, &simRequest{op: opList, after: after})
		if rep.err != nil {
			return Listing{}, rep.err
		}
		if page == 0 {
			l.ServerDate = rep.listing.ServerDate
		}
		l.Slots = append(l.Slots, rep.listing.Slots...)
		l.Tenures = append(l.Tenures, rep.listing.Tenures...)
		l.MarkerSeen = l.MarkerSeen || rep.listing.MarkerSeen
		if !rep.truncated {
			break
		}
		after = rep.next
	}
	sort.Slice(l.Slots, func(i, j int) bool { return l.Slots[i].ID < l.Slots[j].ID })
	l.TenuresListed = true
	return l, nil
}

// ListTenures, CreateTenure and DeleteTenure make simRepo a
// TenureRepository; ReleaseHint and SignalRelease a ReleaseHintRepository.
// Their requests suffer the same faults as any (sim_test.go, route).
func (r *simRepo) ListTenures(ctx context.Context) ([]TenureObject, error) {
	l, err := r.List(ctx)
	return l.Tenures, err
}

func (r *simRepo) CreateTenure(ctx context.Context, t TenureObject) error {
	return r.call(ctx, &simRequest{op: opCreateTenure, id: t.ID, tenure: t}).err
}

func (r *simRepo) DeleteTenure(ctx context.Context, t TenureObject) error {
	return r.call(ctx, &simRequest{op: opDeleteTenure, id: t.ID, tenure: t}).err
}

func (r *simRepo) ReleaseHint(ctx context.Context) (string, error) {
	rep := r.call(ctx, &simRequest{op: opHeadHint})
	return rep.etag, rep.err
}

func (r *simRepo) SignalRelease(ctx context.Context) error {
	etag, err := r.ReleaseHint(ctx)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	err = r.call(ctx, &simRequest{op: opWriteHint, etag: etag}).err
	if err == nil || isLostRace(err) || errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
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

// prepare asks for the tenure's data directory; false if refused.
func (r *simRepo) prepare(inst NodeInstance, graceful bool) bool {
	return r.call(context.Background(), &simRequest{op: opPrepare, id: inst.ID, inst: inst, graceful: graceful}).err == nil
}

// stopGroup returns when the supervisor may release: once the process group
// is gone, or at once with the supervisor bug.
func (r *simRepo) stopGroup() {
	r.call(context.Background(), &simRequest{op: opStopGroup})
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
		objects, marker, tenures, hint := w.objects, w.marker != nil, w.tenures, w.hint != nil
		if req.staleBy > 0 {
			s := w.snapshotAt(now.Add(-req.staleBy))
			objects, marker, tenures, hint = s.objects, s.marker, s.tenures, s.hint
			w.count("stale listing pages served")
		}
		// Keys in S3's order (10.json sorts before 2.json), from the
		// continuation token on, at most pageSize of them.
		type entry struct {
			key string
			id  int
			o   *simObject
		}
		var keys []entry
		for id, o := range objects {
			keys = append(keys, entry{LeaseKey("", id), id, o})
		}
		if marker {
			keys = append(keys, entry{key: MarkerKey("")})
		}
		for k := range tenures {
			keys = append(keys, entry{key: k, id: -1})
		}
		if hint {
			keys = append(keys, entry{key: ReleaseHintKey, id: -2})
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i].key < keys[j].key })
		keys = keys[sort.Search(len(keys), func(i int) bool { return keys[i].key > req.after }):]
		page := w.p.pageSize
		if page == 0 {
			page = 1000
		}
		rep := simReply{listing: Listing{ServerDate: date}, shows: map[string]*simObject{}, truncated: len(keys) > page}
		if rep.truncated {
			keys = keys[:page]
		}
		if req.after != "" {
			w.count("listing pages after the first")
		}
		for _, k := range keys {
			if k.id == -1 {
				t, ok := ParseTenureKey("", k.key)
				if !ok {
					panic("unparsable tenure key " + k.key)
				}
				t.LastModified = tenures[k.key].lastModified
				rep.listing.Tenures = append(rep.listing.Tenures, t)
				continue
			}
			if k.id == -2 {
				continue
			}
			if k.o == nil {
				rep.listing.MarkerSeen = true
				continue
			}
			rep.listing.Slots = append(rep.listing.Slots, Slot{ID: k.id, ETag: k.o.etag, LastModified: k.o.lastModified, Size: int64(len(k.o.body))})
			rep.shows[k.o.etag] = k.o
		}
		if len(keys) > 0 {
			rep.next = keys[len(keys)-1].key
		}
		return rep
	case opCreateTenure:
		k, ok := TenureKey("", req.tenure)
		if !ok {
			return fail(ErrUnavailable, 400)
		}
		if _, ok := w.tenures[k]; ok {
			return fail(ErrPreconditionFailed, 412)
		}
		// A tenure object is written after its take landed: it never
		// names a version above every version the ID ever had.
		if req.tenure.Version > w.maxEver[req.id] {
			w.violate("node %d: %s's tenure object names v%d, above every version written (v%d)", req.id, req.task.name, req.tenure.Version, w.maxEver[req.id])
		}
		body := []byte(k)
		w.tenures[k] = &simObject{body: body, etag: w.etagOf(body), lastModified: now.Truncate(time.Second)}
		w.snapshot()
		return simReply{}
	case opDeleteTenure:
		// Only the holder's own garbage: its node ID, below a version it
		// held.
		if t := req.task; req.tenure.Version >= t.took[req.id] {
			w.violate("node %d: %s deleted the tenure object of v%d (%s's), not its own garbage (it took v%d of it; holds %v)", req.id, t.name, req.tenure.Version, req.tenure.TaskID, t.took[req.id], t.prov().Instance())
		}
		if k, ok := TenureKey("", req.tenure); ok {
			delete(w.tenures, k)
			w.count("tenure objects collected")
			w.snapshot()
		}
		return simReply{}
	case opHeadHint:
		if w.hint == nil {
			return fail(ErrNotFound, 404)
		}
		return simReply{etag: w.hint.etag}
	case opWriteHint:
		switch {
		case req.etag == "" && w.hint != nil:
			return fail(ErrPreconditionFailed, 412)
		case req.etag != "" && w.hint == nil:
			return fail(ErrNotFound, 404)
		case req.etag != "" && w.hint.etag != req.etag:
			return fail(ErrPreconditionFailed, 412)
		}
		body := []byte(fmt.Sprintf("hint %d", w.etagSeq))
		w.hint = &simObject{body: body, etag: w.etagOf(body), lastModified: now.Truncate(time.Second)}
		w.count("release hints written")
		w.snapshot()
		return simReply{etag: w.hint.etag}
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
		w.snapshot()
		return simReply{etag: w.marker.etag}
	case opGet:
		o, ok := w.objects[req.id]
		if !ok {
			return fail(ErrNotFound, 404)
		}
		if req.raw {
			return simReply{etag: o.etag, body: bytes.Clone(o.body), meta: maps.Clone(o.meta), shows: map[string]*simObject{o.etag: o}}
		}
		rec := Record{Slot: Slot{ID: req.id, ETag: o.etag, LastModified: o.lastModified, Size: int64(len(o.body))}, ServerDate: date}
		var err error
		rec.Lease, err = DecodeLease(req.id, o.body, o.meta)
		return simReply{record: rec, err: err, shows: map[string]*simObject{o.etag: o}}
	case opCreate:
		if _, ok := w.objects[req.id]; ok {
			return fail(ErrPreconditionFailed, 412)
		}
		o := w.store(req, now)
		return simReply{etag: o.etag, shows: map[string]*simObject{o.etag: o}}
	case opWrite:
		o, ok := w.objects[req.id]
		if !ok {
			return fail(ErrNotFound, 404)
		}
		if o.etag != req.etag {
			return fail(ErrPreconditionFailed, 412)
		}
		if read := req.task.seenAs(req.etag); read != nil && read != o && !sameState(read, o) {
			if read.byCamunda && o.byCamunda && len(read.body) == 0 && len(o.body) == 0 {
				// Both states are Camunda's empty bodies (one ETag, the MD5
				// of ""): Camunda's own ABA, condition 3 of mixed operation.
				req.abaOnCamunda = true
				w.weakness("node %d: %s's If-Match on %s landed on another of Camunda's empty bodies than the one it read (ABA on Camunda's release, v%s read, v%s found)", req.id, req.task.name, req.etag, read.meta[MetaVersion], o.meta[MetaVersion])
			} else {
				w.violate("node %d: %s's If-Match on %s landed on another write than the one it read (ABA)", req.id, req.task.name, req.etag)
			}
		}
		o = w.store(req, now)
		return simReply{etag: o.etag, shows: map[string]*simObject{o.etag: o}}
	}
	panic("unknown op")
}

// seenAs returns the write t last received under etag, if any.
func (t *simTask) seenAs(etag string) *simObject {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.seen[etag]
}

// store writes req's lease and checks the invariants of a write on the way.
func (w *simWorld) store(req *simRequest, now time.Time) *simObject {
	body, meta := w.encode(req.lease)
	if req.raw {
		body, meta = req.body, req.meta
	}
	o := &simObject{body: body, meta: meta, etag: w.etagOf(body), lastModified: now.Truncate(time.Second), byCamunda: req.raw}
	o.lease, o.decoded = decodeOK(req.id, body, meta)
	prev := w.objects[req.id]
	w.objects[req.id] = o
	if t := req.task; t != nil && o.decoded {
		l := o.lease
		w.checkVersion(t, l, prev, req)
		// A "recreated-by:" lease (a holder recreating its deleted object
		// after its loss) stands for an unknown holder, not a tenure.
		if l.Held() && l.TaskID == t.name && req.afterLoss && t.cam == nil {
			w.violate("task %s sent a write of a held lease of node %d after its tenure ended (%v)", t.name, l.Instance.ID, t.prov().Err())
		}
		if t.name == "operator" && prev != nil && prev.decoded && prev.lease.Held() {
			// A forced release over a crashed holder: the operator knew it
			// dead, and it is (no requests, no process group).
			for _, c := range w.tasks {
				if c.name == prev.lease.TaskID && c.crashed() {
					c.mu.Lock()
					c.forcedOut = true
					c.mu.Unlock()
				}
			}
		}
		if !t.admin && prev != nil && prev.meta[MetaAcquirable] == "false" {
			w.violate("node %d: task %s's write landed on an object marked unusable by a scale-down", req.id, t.name)
		}
		w.countWrite(t, l, prev)
	}
	w.changed()
	return o
}

func decodeOK(id int, body []byte, meta map[string]string) (Lease, bool) {
	l, err := DecodeLease(id, body, meta)
	return l, err == nil
}

// checkVersion checks the version promise (docs/simulation.md): a write by a
// task or the operator never puts a node's version below the floor, and a
// task's acquisition gets a version above it. The floor is the highest
// version of the node that was written and that the bucket has recorded
// without a break since (in the node's object or in any object's
// knownVersionMappings); see changed.
func (w *simWorld) checkVersion(t *simTask, l Lease, prev *simObject, req *simRequest) {
	id, v := l.Instance.ID, l.Instance.Version
	floor := w.floor[id]
	acquisition := l.TaskID == t.name && (prev == nil || prev.meta[MetaTaskID] != l.TaskID)
	switch {
	case acquisition && v <= floor && (t.cam != nil || req.abaOnCamunda):
		// A Camunda broker takes the object's version + 1 and reads no other
		// lease; a nodeid take that landed through Camunda's ABA takes the
		// version of the Camunda tenure it did not see (condition 3).
		w.weakness("node %d: %s acquired version %d, not above %d, which the bucket still records (%s)", id, t.name, v, floor, w.recordedWhere(id, floor))
	case acquisition && v <= floor:
		w.violate("node %d: task %s acquired version %d, not above %d, which the bucket still records (%s)", id, t.name, v, floor, w.recordedWhere(id, floor))
	case v < floor && !strings.HasPrefix(l.TaskID, recreatedPrefix) && !(prev == nil && !l.Held() && v == 0) &&
		(prev == nil || !prev.decoded || v < prev.lease.Instance.Version):
		// (A write that keeps the object's version, as a scale-down's mark
		// does, lowers nothing: an outsider lowered it before.)
		// A recreated object (an unknown holder) or a bootstrap create that
		// landed late (after an outside delete) may name less than the bucket
		// records elsewhere: neither is a tenure, its taker reads every lease
		// first, and the acquisition check above holds it to the floor.
		w.violate("node %d: version went down from %d to %d (written by %s; %d recorded %s)", id, floor, v, t.name, floor, w.recordedWhere(id, floor))
	}
	if acquisition && v <= w.maxEver[id] {
		w.count("acquisitions at a version the bucket had forgotten")
	}
	w.floor[id] = max(floor, v)
	w.maxEver[id] = max(w.maxEver[id], v)
	if l.Held() && l.TaskID == t.name {
		// Any write of a lease naming t as holder, not only an acquisition
		// by the check above: a take given up may land late, and t's
		// later take of the ID then writes over its own.
		if t.took == nil {
			t.took = map[int]Version{}
		}
		t.took[id] = max(t.took[id], v)
	}
}

// changed runs after every change of the bucket: it lowers each node's
// floor to what the bucket still records of it, and keeps a snapshot for
// stale listings.
func (w *simWorld) changed() {
	for id, f := range w.floor {
		if r := w.recorded(id); r < f {
			w.floor[id] = r
		}
	}
	w.snapshot()
}

// recorded is the highest version of id that the bucket records.
func (w *simWorld) recorded(id int) Version {
	var r Version
	for oid, o := range w.objects {
		if !o.decoded {
			continue
		}
		if oid == id {
			r = max(r, o.lease.Instance.Version)
		}
		r = max(r, o.lease.KnownVersions[id])
	}
	return r
}

// recordedWhere names the objects that record version v of id or above.
func (w *simWorld) recordedWhere(id int, v Version) string {
	var where []string
	for oid, o := range w.objects {
		switch {
		case !o.decoded:
		case oid == id && o.lease.Instance.Version >= v:
			where = append(where, fmt.Sprintf("in its own object, v%d", o.lease.Instance.Version))
		case o.lease.KnownVersions[id] >= v:
			who := o.lease.TaskID
			if who == "" {
				who = "released by " + o.lease.Writer
			}
			where = append(where, fmt.Sprintf("in the mappings of node %d's object (%s): %d", oid, who, o.lease.KnownVersions[id]))
		}
	}
	sort.Strings(where)
	return strings.Join(where, "; ")
}

// countWrite counts the kinds of writes the sweep reports as coverage.
func (w *simWorld) countWrite(t *simTask, l Lease, prev *simObject) {
	if prev == nil || !prev.decoded {
		return
	}
	was := prev.lease
	if l.TaskID == t.name && was.TaskID != t.name { // a take: count the mixed ones
		from := "nodeid"
		if prev.byCamunda {
			from = "Camunda"
		}
		switch {
		case t.cam != nil && !prev.byCamunda || t.cam == nil && prev.byCamunda:
			by := "nodeid"
			if t.cam != nil {
				by = "Camunda"
			}
			state := "held (expired)"
			if !was.Held() {
				state = "released or never held"
			}
			w.count(fmt.Sprintf("takes by %s of a %s lease %s", by, from, state))
		}
	}
	switch {
	case t.admin && was.Acquirable && !l.Acquirable && was.Held():
		w.count("scale-downs of held IDs")
	case t.admin && was.Acquirable && !l.Acquirable:
		w.count("scale-downs of released or never-held IDs")
	case t.admin && !was.Acquirable && l.Acquirable:
		w.count("scale-ups of removed IDs")
	case !l.Held() && was.TaskID == t.name && w.chaotic():
		w.count("releases during the chaos phase")
	}
}

// simSnapshot is the bucket at one moment, for listings that lag.
type simSnapshot struct {
	at      time.Time
	objects map[int]*simObject
	marker  bool
	tenures map[string]*simObject
	hint    bool
}

// maxStale is how far behind a stale listing may be.
const maxStale = 2 * time.Second

func (w *simWorld) snapshot() {
	if w.p.staleLists == 0 {
		return
	}
	now := time.Now()
	w.snaps = append(w.snaps, simSnapshot{at: now, objects: maps.Clone(w.objects), marker: w.marker != nil, tenures: maps.Clone(w.tenures), hint: w.hint != nil})
	i := 0 // keep the newest snapshot older than maxStale, and all after it
	for i+1 < len(w.snaps) && !w.snaps[i+1].at.After(now.Add(-maxStale)) {
		i++
	}
	w.snaps = w.snaps[i:]
}

// snapshotAt returns the bucket as it was at t (objects are never changed
// in place, so a shallow copy is a true snapshot).
func (w *simWorld) snapshotAt(t time.Time) simSnapshot {
	s := w.snaps[0]
	for _, c := range w.snaps {
		if c.at.After(t) {
			break
		}
		s = c
	}
	return s
}

// outsideWrite overwrites or deletes a lease object from outside the
// protocol, as an operator or a chaos script would.
func (w *simWorld) outsideWrite(id int, now time.Time, del bool) string {
	o, ok := w.objects[id]
	if !ok {
		return "nothing to change"
	}
	if del && w.p.camunda > 0 && w.marker == nil {
		// Condition 7 of mixed operation (docs/migration.md): no lease
		// object is deleted before nodeid's marker exists. nodeid's
		// freshness proof cannot see a Camunda tenure whose object is gone
		// (seeds 13102 and 15660 of the test-suite issue's sweep).
		w.count("outside deletes left out: Camunda brokers, no marker yet")
		return "nothing deleted (condition 7)"
	}
	if del {
		w.countDelete(id, o)
		delete(w.objects, id)
		w.changed()
		return fmt.Sprintf("deleted node %d", id)
	}
	v := Version(1)
	if o.decoded && o.lease.Instance.Version > 0 {
		v = o.lease.Instance.Version
	}
	req := &simRequest{op: opWrite, id: id, lease: Lease{TaskID: "outsider", Instance: NodeInstance{ID: id, Version: v},
		Expires: now.Add(time.Hour), Duration: time.Second, Nonce: fmt.Sprint(w.etagSeq), Acquirable: true}}
	w.store(req, now)
	return fmt.Sprintf("overwrote node %d as outsider v%d", id, v)
}

func (w *simWorld) countDelete(id int, o *simObject) {
	w.count("outside deletes")
	if o.decoded && o.lease.Held() {
		w.count("outside deletes of held leases")
	}
	if w.size == 1 {
		w.count("outside deletes with cluster size 1")
	}
	for oid, p := range w.objects {
		if oid != id && p.decoded && !p.lease.Held() && p.lease.Instance.Version == 0 {
			w.count("outside deletes beside never-held objects")
			break
		}
	}
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

// rawGet is a Camunda broker's GET: the object's body, metadata and ETag as
// S3 returns them.
func (r *simRepo) rawGet(ctx context.Context, id int) (body []byte, meta map[string]string, etag string, err error) {
	rep := r.call(ctx, &simRequest{op: opGet, id: id, raw: true})
	return rep.body, rep.meta, rep.etag, rep.err
}

// rawPut is a Camunda broker's PUT of body and meta with If-Match ifMatch.
func (r *simRepo) rawPut(ctx context.Context, id int, body []byte, meta map[string]string, ifMatch string) (string, error) {
	rep := r.call(ctx, &simRequest{op: opWrite, id: id, raw: true, body: body, meta: meta, etag: ifMatch})
	return rep.etag, rep.err
}

// corrupt writes garbage over node id's object from outside, as a broken
// script or a hand edit would: a body that is not JSON, a torn body, or a
// body whose metadata disagrees with it. Such an object is never taken;
// an operator repairs it later with ForceRelease (see operatorRelease).
func (w *simWorld) corrupt(id int, now time.Time, how int) string {
	o, ok := w.objects[id]
	body, meta := []byte("<Error>not a lease</Error>"), map[string]string{}
	switch {
	case how%3 == 1 && ok && len(o.body) > 8:
		body, meta = bytes.Clone(o.body[:len(o.body)/2]), maps.Clone(o.meta)
	case how%3 == 2 && ok && o.decoded:
		// A body that disagrees with the metadata. (Not the same body with
		// other metadata: its ETag, the body's MD5, would not change, and
		// an If-Match read before would land on it, as on S3.)
		l := o.lease
		l.Instance.Version += 7
		body, _ = w.encode(l)
		meta = maps.Clone(o.meta)
	}
	if _, decoded := decodeOK(id, body, meta); decoded {
		body, meta = []byte("<Error>not a lease</Error>"), map[string]string{}
	}
	if ok {
		w.countDelete(id, o) // what it held is gone, as after a delete
	}
	w.objects[id] = &simObject{body: body, meta: meta, etag: w.etagOf(body), lastModified: now.Truncate(time.Second)}
	w.count("outside writes of corrupt objects")
	w.changed()
	return fmt.Sprintf("corrupted node %d (%d bytes)", id, len(body))
}

// guardedRepo is the operator's view: release --force only what the
// operator decided to release. Its first read of the node must still show
// that state (allow); otherwise it stops, as an operator who looks first
// would. ForceRelease's If-Match then lands only on that state.
type guardedRepo struct {
	*simRepo
	id      int
	allow   func(rec Record, err error) bool
	checked bool
}

func (r *guardedRepo) Get(ctx context.Context, id int) (Record, error) {
	rec, err := r.simRepo.Get(ctx, id)
	if id == r.id && !r.checked {
		r.checked = true
		if !r.allow(rec, err) {
			return Record{}, &StorageError{Op: "get", Kind: ErrAccessDenied, Err: fmt.Errorf("operator: node %d is no longer what was to be released", id)}
		}
	}
	return rec, err
}

// operatorRelease runs the real ForceRelease for node id, as `nodeid-init
// release --force --data-root` does: at least the newest version in the data
// root. Its requests travel like everyone's.
func (w *simWorld) operatorRelease(id int, why string, allow func(Record, error) bool) {
	var atLeast Version
	for v := range w.dirs[id] {
		atLeast = max(atLeast, v)
	}
	op := &simTask{name: "operator", admin: true}
	op.repo = &simRepo{w: w, task: op}
	rng := rand.New(rand.NewPCG(w.rng.Uint64(), 0))
	nonce := func() string { return fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64()) }
	w.log(fmt.Sprintf("operator: release --force node %d (%s), at least v%d", id, why, atLeast))
	w.running.Add(1)
	go func() {
		defer w.running.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		v, err := forceRelease(ctx, &guardedRepo{simRepo: op.repo, id: id, allow: allow}, id, atLeast, "operator", nonce)
		w.post(op, func() {
			switch {
			case err == nil:
				w.count("forced releases: " + why)
				w.log(fmt.Sprintf("operator: node %d released at v%d", id, v))
			case errors.Is(err, ErrVersionUnknown):
				w.count("forced releases refused: version unknown")
				w.log(fmt.Sprintf("operator: node %d: %v", id, err))
			default:
				w.log(fmt.Sprintf("operator: node %d: %v", id, err))
			}
		})
	}()
}
