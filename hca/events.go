package hca

// EventType is an asynchronous event type (ibv_event_type subset).
type EventType uint8

// Asynchronous events.
const (
	EventSRQLimitReached EventType = iota + 1
	// EventQPFatal: the QP lost a completion to an overrun of its CQ and
	// went to ERR (a local work queue catastrophic error); raised once per
	// QP until it is next moved to RESET.
	EventQPFatal
	EventSQDrained
	// EventCQErr: the CQ overran and lost a completion; raised the first
	// time. Poll reports ErrCQOverflow from then on.
	EventCQErr
	// EventQPLastWQEReached: a QP attached to an SRQ entered ERR and will
	// take no more of its WQEs; raised once per stay in ERR.
	EventQPLastWQEReached
)

func (t EventType) String() string {
	switch t {
	case EventSRQLimitReached:
		return "SRQ_LIMIT_REACHED"
	case EventQPFatal:
		return "QP_FATAL"
	case EventSQDrained:
		return "SQ_DRAINED"
	case EventCQErr:
		return "CQ_ERR"
	case EventQPLastWQEReached:
		return "QP_LAST_WQE_REACHED"
	}
	return "UNKNOWN"
}

// AsyncEvent is one asynchronous event (ibv_get_async_event).
type AsyncEvent struct {
	Type EventType
	QP   *QP
	SRQ  *SRQ
	CQ   *CQ
}

// Events returns the device's asynchronous event channel. Events are
// dropped (and counted in EventsDropped) when nobody reads it and its
// buffer is full. Close closes it, after the events still buffered.
func (d *Device) Events() <-chan AsyncEvent { return d.rt.events }

func (d *Device) raise(e AsyncEvent) {
	d.evMu.Lock()
	defer d.evMu.Unlock()
	if d.evClosed {
		return // the device is closed: nobody is to learn of its QPs
	}
	select {
	case d.rt.events <- e:
	default:
		d.rt.eventsDropped.Add(1)
	}
}
