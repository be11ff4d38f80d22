// Package fifo is a map bounded by count that forgets its oldest entries
// first: what a long-lived process remembers of a stream (finished runs a
// later event may name) must not grow with the stream.
package fifo

// Map maps keys to values, holding at most Max keys: putting one more
// forgets the key put (or put again) longest ago. Not safe for concurrent
// use. The zero value is not usable: use New.
type Map[K comparable, V any] struct {
	m     map[K]entry[V]
	order []slot[K] // oldest first; a slot whose seq is stale is skipped
	seq   uint64
	max   int
}

type entry[V any] struct {
	v   V
	seq uint64
}

type slot[K comparable] struct {
	k   K
	seq uint64
}

// New returns a Map of at most n keys (at least 1).
func New[K comparable, V any](n int) *Map[K, V] {
	return &Map[K, V]{m: make(map[K]entry[V]), max: max(n, 1)}
}

// Put sets k to v, as the newest key, and returns how many keys it forgot
// to stay within the bound.
func (m *Map[K, V]) Put(k K, v V) (forgot int) {
	m.seq++
	m.m[k] = entry[V]{v, m.seq}
	m.order = append(m.order, slot[K]{k, m.seq})
	for len(m.m) > m.max {
		s := m.order[0]
		m.order = m.order[1:]
		if e, ok := m.m[s.k]; ok && e.seq == s.seq {
			delete(m.m, s.k)
			forgot++
		}
	}
	if len(m.order) > 2*m.max+64 {
		// Keys put again left stale slots behind: drop them.
		n := 0
		for _, s := range m.order {
			if e, ok := m.m[s.k]; ok && e.seq == s.seq {
				m.order[n] = s
				n++
			}
		}
		clear(m.order[n:])
		m.order = m.order[:n]
	}
	return forgot
}

// Get returns k's value, if k is held.
func (m *Map[K, V]) Get(k K) (V, bool) {
	e, ok := m.m[k]
	return e.v, ok
}

// Len returns how many keys are held.
func (m *Map[K, V]) Len() int { return len(m.m) }

// Values returns the values held, oldest first.
func (m *Map[K, V]) Values() []V {
	var out []V
	for _, s := range m.order {
		if e, ok := m.m[s.k]; ok && e.seq == s.seq {
			out = append(out, e.v)
		}
	}
	return out
}
