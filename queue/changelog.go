package queue

// changeLog lists the nodes (queues) changed since its last take, each
// once, so that a policy can keep its order across cycles and redo only
// what changed (see DRS). epoch counts the takes: a cursor that remembers
// the epoch after its own take knows, when the epoch has moved since, that
// someone else took changes it never saw, and starts over.
type changeLog struct {
	list  []int32
	mark  []bool // by node index
	epoch uint64
}

func newChangeLog(nodes int) changeLog { return changeLog{mark: make([]bool, nodes)} }

// note records that node i changed.
func (l *changeLog) note(i int32) {
	if !l.mark[i] {
		l.mark[i] = true
		l.list = append(l.list, i)
	}
}

// take returns the changed nodes and starts a new epoch. The slice is valid
// until the next note.
func (l *changeLog) take() []int32 {
	out := l.list
	for _, i := range out {
		l.mark[i] = false
	}
	l.list = l.list[:0]
	l.epoch++
	return out
}
