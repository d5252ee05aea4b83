package pg

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// DefaultLeaseMemoBytes bounds the lease memo (Store.leases): about 40k
// leased messages with 36-byte transactionIds.
const DefaultLeaseMemoBytes = 4 << 20

// leaseMemoEntryOverhead is what one entry costs beyond its transactionIds
// (the entry, its list element and map slot, its offsets), in bytes: the
// unit of the memo's bound with len(ids) and 4 bytes per offset.
const leaseMemoEntryOverhead = 256

// leaseMemo remembers, for the leases this broker handed out, which
// transactionId sits at which offset: what an ack by transactionId needs
// and would otherwise read back from the lease's segments (ackLoadSQL).
// It is a hint, never the truth: an ack that uses it (fastAckSQL) applies
// only if the cursor row in PostgreSQL is still exactly as the pop left it
// (same lease, live, cursor at the lease's first offset, nothing acked,
// no deleted offset in the lease, its first and last segments still
// stored); otherwise the ack takes the general path, which reads the
// segments. So an entry that is stale (a lease that lapsed, was released,
// extended elsewhere, or handed out by another broker) costs one
// statement, not a wrong answer.
//
// Entries are keyed by (partition id, lease id): lease ids are minted per
// pop (8 random bytes and a cursor's lease key, pg/leasekey.go), so a key
// is never reused for other offsets. The memo holds
// at most maxBytes (entry overhead plus transactionId bytes), dropping the
// oldest entries first, and drops entries older than their lease.
type leaseMemo struct {
	mu       sync.Mutex
	maxBytes int
	bytes    int
	byKey    map[leaseMemoKey]*list.Element
	latest   map[ackKey]leaseMemoKey // (partition, group) → its newest entry
	order    *list.List              // of *leaseMemoEntry, oldest first

	applied atomic.Int64 // acks fastAck completed with an entry (for tests and metrics)
}

type leaseMemoKey struct{ partition, lease uuid.UUID }

// leaseMemoEntry is one (partition, lease): offsets first..last, the
// transactionId of offset first+i being ids[ends[i-1]:ends[i]] (ends[-1]
// = 0). The ids are copied out of the segment bodies so that the memo
// pins no body.
type leaseMemoEntry struct {
	key                 leaseMemoKey
	group               string
	queueName, partName string
	first, last         int64
	ids                 []byte
	ends                []uint32
	expires             time.Time
}

func (e *leaseMemoEntry) size() int {
	return leaseMemoEntryOverhead + len(e.ids) + 4*len(e.ends) + len(e.group) + len(e.queueName) + len(e.partName)
}

// id is the transactionId of offset first+i.
func (e *leaseMemoEntry) id(i int) string {
	from := uint32(0)
	if i > 0 {
		from = e.ends[i-1]
	}
	return aliasString(e.ids[from:e.ends[i]])
}

// offsetOf is the offset holding transactionId txid, looked for first at
// index hint (acks usually come in delivery order), or -1.
func (e *leaseMemoEntry) offsetOf(txid string, hint int) int64 {
	if hint >= 0 && hint < len(e.ends) && e.id(hint) == txid {
		return e.first + int64(hint)
	}
	for i := range e.ends {
		if e.id(i) == txid {
			return e.first + int64(i)
		}
	}
	return -1
}

func newLeaseMemo(maxBytes int) *leaseMemo {
	if maxBytes <= 0 {
		maxBytes = DefaultLeaseMemoBytes
	}
	return &leaseMemo{maxBytes: maxBytes, byKey: map[leaseMemoKey]*list.Element{}, latest: map[ackKey]leaseMemoKey{},
		order: list.New()}
}

// rememberPop records the leases of a committed leased pop: one entry per
// partition whose messages cover a contiguous run of offsets (a run with
// deleted offsets inside is left to the general ack path). leaseSeconds
// is the queue's lease time.
func (m *leaseMemo) rememberPop(res *PopResult, group, queue string, leaseSeconds int) {
	if m == nil || res.LeaseID == uuid.Nil || len(res.Messages) == 0 {
		return
	}
	expires := time.Now().Add(time.Duration(leaseSeconds) * time.Second)
	msgs := res.Messages
	for len(msgs) > 0 {
		n := 1
		for n < len(msgs) && msgs[n].PartitionID == msgs[0].PartitionID {
			n++
		}
		run := msgs[:n]
		msgs = msgs[n:]
		first, last := run[0].Offset, run[n-1].Offset
		if last-first+1 != int64(n) {
			continue
		}
		e := &leaseMemoEntry{key: leaseMemoKey{run[0].PartitionID, res.LeaseID}, group: group, queueName: queue,
			partName: run[0].Partition, first: first, last: last, ends: make([]uint32, n), expires: expires}
		size := 0
		for i := range run {
			size += len(run[i].TransactionID)
		}
		e.ids = make([]byte, 0, size)
		for i := range run {
			e.ids = append(e.ids, run[i].TransactionID...)
			e.ends[i] = uint32(len(e.ids))
		}
		m.put(e)
	}
}

func (m *leaseMemo) put(e *leaseMemoEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byKey[e.key]; ok {
		m.removeLocked(el)
	}
	now, size := time.Now(), e.size()
	for el := m.order.Front(); el != nil; el = m.order.Front() {
		old := el.Value.(*leaseMemoEntry)
		if m.bytes+size <= m.maxBytes && old.expires.After(now) {
			break
		}
		m.removeLocked(el)
	}
	if size > m.maxBytes {
		return
	}
	m.byKey[e.key] = m.order.PushBack(e)
	m.latest[ackKey{e.key.partition, e.group}] = e.key
	m.bytes += size
}

func (m *leaseMemo) removeLocked(el *list.Element) {
	e := m.order.Remove(el).(*leaseMemoEntry)
	delete(m.byKey, e.key)
	if k := (ackKey{e.key.partition, e.group}); m.latest[k] == e.key {
		delete(m.latest, k)
	}
	m.bytes -= e.size()
}

// get returns the entry of (partition, lease), or, with lease nil, the
// newest entry of (partition, group); nil when there is none.
func (m *leaseMemo) get(partition uuid.UUID, group string, lease *uuid.UUID) *leaseMemoEntry {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := leaseMemoKey{}, false
	if lease != nil {
		k, ok = leaseMemoKey{partition, *lease}, true
	} else {
		k, ok = m.latest[ackKey{partition, group}]
	}
	if !ok {
		return nil
	}
	if el, ok := m.byKey[k]; ok {
		if e := el.Value.(*leaseMemoEntry); e.group == group {
			return e
		}
	}
	return nil
}

// forget drops the entry of (partition, lease), if any.
func (m *leaseMemo) forget(partition, lease uuid.UUID) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byKey[leaseMemoKey{partition, lease}]; ok {
		m.removeLocked(el)
	}
}

// len is the number of entries and their bytes (for tests).
func (m *leaseMemo) len() (int, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.order.Len(), m.bytes
}
