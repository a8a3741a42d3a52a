package enginetest

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/berthsched/berth/engine"
)

// handleReservation: reservation NAME start=+D (dur=D | end=+D)
// (nodes=n0,n1 | gpus=N [domain=level:name]) [accounts=a,b] [maint]
// sets an advance reservation; reservation NAME delete deletes it;
// reservation list prints them. Errors are printed.
func (h *Harness) handleReservation(d *datadriven.TestData) (string, error) {
	if len(d.CmdArgs) == 0 {
		return "", fmt.Errorf("reservation NAME ...")
	}
	name := d.CmdArgs[0].Key
	if name == "list" {
		var b strings.Builder
		for _, r := range h.E.AdvanceReservations() {
			fmt.Fprintf(&b, "%s %s..%s:", r.Name, rel(r.Start), rel(r.End))
			last := ""
			for _, g := range r.GPUs {
				if g.Node != last {
					fmt.Fprintf(&b, " %s", g.Node)
					last = g.Node
				}
				fmt.Fprintf(&b, "[%d]", g.GPU)
			}
			if r.Maintenance {
				b.WriteString(" (maintenance)")
			}
			b.WriteByte('\n')
		}
		return b.String(), nil
	}
	var ev engine.Event
	if _, del := arg(d, "delete"); del {
		ev = engine.ReservationDeleted(h.now, name)
	} else {
		r := engine.AdvanceReservation{Name: name}
		off := func(v string) (time.Time, error) {
			dd, err := time.ParseDuration(strings.TrimPrefix(v, "+"))
			return T0().Add(dd), err
		}
		for _, a := range d.CmdArgs[1:] {
			v := strings.Join(a.Vals, ",")
			var err error
			switch a.Key {
			case "start":
				r.Start, err = off(v)
			case "end":
				r.End, err = off(v)
			case "dur":
				r.Duration, err = time.ParseDuration(v)
			case "nodes":
				r.Nodes = a.Vals
			case "gpus":
				r.GPUs, err = strconv.Atoi(v)
			case "domain":
				l, n, _ := strings.Cut(v, ":")
				r.Domain = engine.DomainRef{Level: l, Name: n}
			case "accounts":
				r.Accounts = a.Vals
			case "maint":
				r.Maintenance = true
			default:
				return "", fmt.Errorf("reservation: unknown key %q", a.Key)
			}
			if err != nil {
				return "", fmt.Errorf("reservation: %s: %v", a.Key, err)
			}
		}
		ev = engine.ReservationSet(h.now, r)
	}
	if err := h.E.Step(ev); err != nil {
		return fmt.Sprintf("error: %v\n", err), nil
	}
	return "", nil
}
