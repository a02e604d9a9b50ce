package dataplane

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/dataplane/admin"
	"github.com/tern-gw/tern/dataplane/allowlist"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/protocol"
	"github.com/tern-gw/tern/dataplane/listener"
	"github.com/tern-gw/tern/dataplane/listener/core"
	"github.com/tern-gw/tern/dataplane/listener/dtls"
	"github.com/tern-gw/tern/dataplane/listener/dtls/record"
	"github.com/tern-gw/tern/dataplane/listener/stream"
	"github.com/tern-gw/tern/dataplane/listener/udp"
	"github.com/tern-gw/tern/dataplane/secretfile"
	"github.com/tern-gw/tern/dataplane/takeover"
	"github.com/tern-gw/tern/turn"
)

// The hand-over of a running ternd to its successor (ternd --takeover,
// docs/operations.md "Upgrades"). The old process listens on the hand-over
// socket (ServeHandover). A successor (Takeover) connects and says hello;
// the old one stops reading its TURN-UDP and TURN-DTLS listener and relay
// sockets and sweeping, and sends their descriptors and the snapshot of
// its TURN-UDP allocations and of its TURN-DTLS associations whose
// handshake was done, with their record state and allocations
// (dataplane/takeover). The successor adopts them without reading, and
// confirms (ready). Only then does the old one stop accepting on its TCP
// and TLS listeners (their connections and allocations stay with it until
// they close), stop sending on its TURN-DTLS sockets (associations still
// in their handshake are dropped: their clients shake hands again with
// the successor), close the health and metrics endpoints and the
// hand-over socket, forget the handed-over allocations
// (Engine.ForgetTransport, relay.Pool.Detach), say
// bye and report HandedOver, after which ternd exits, once its last TCP or
// TLS connection has closed, without closing the handed-
// over sockets. The successor then reads them and opens the rest.
// Datagrams that arrive meanwhile wait in the sockets' kernel buffers.
// With the offload on, its maps, programs and links travel as
// descriptors after the sockets' (handover_offload.go): the kernel relays
// bound channels throughout, and the successor takes them over only once
// the old process has said bye.
//
// If the successor fails or goes away before it confirms, or takes longer
// than handoverTimeout, the old process reads again and serves on.

// handoverTimeout bounds the hand-over from hello to ready.
const handoverTimeout = 30 * time.Second

// pausable is a listener that a hand-over can hold and give away: a
// TURN-UDP listener (*udp.Listener).
type pausable interface {
	listener.Listener
	Pause()
	Resume()
	Sockets() []int
}

// ServeHandover listens on the hand-over socket at path (owner-only) for a
// successor and hands this server's TURN-UDP and TURN-DTLS sockets,
// associations and allocations to the first that asks and confirms. It returns an error when the socket
// cannot be made (takeover.Listen); the server then serves on without one.
func (s *Server) ServeHandover(path string) error {
	ln, err := takeover.Listen(path)
	if err != nil {
		return err
	}
	s.changeMu.Lock()
	s.handoverLn = ln
	s.changeMu.Unlock()
	s.log.Info("hand-over socket", "path", path)
	go func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			done := s.handOver(takeover.NewConn(c))
			c.Close()
			if done {
				return
			}
		}
	}()
	return nil
}

// HandedOver is closed when this server has handed its sockets to a
// successor: the process must then exit without Close, which would
// delete allocations the successor now serves.
func (s *Server) HandedOver() <-chan struct{} { return s.handedOver }

// handOver runs the old process's side of one hand-over and reports
// whether it handed over.
func (s *Server) handOver(c *takeover.Conn) bool {
	_ = c.SetDeadline(time.Now().Add(handoverTimeout))
	if err := c.ExpectHello(); err != nil {
		s.log.Warn("hand-over: no valid hello from the successor; serving on", "error", err)
		c.Abort(err.Error())
		return false
	}
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	s.mu.Lock()
	closed, cfg := s.closed, s.cfg
	s.mu.Unlock()
	switch {
	case closed:
		c.Abort("the old process is shutting down")
		return false
	}
	s.listenersMu.Lock()
	var udps []pausable
	var dtlss []*dtls.Listener
	for _, lc := range cfg.Listeners {
		switch l := s.listeners[lc.Name].(type) {
		case pausable:
			udps = append(udps, l)
		case *dtls.Listener:
			dtlss = append(dtlss, l)
		}
	}
	s.listenersMu.Unlock()

	start := time.Now()
	s.sweepPaused.Store(true)
	for _, l := range udps {
		l.Pause()
	}
	for _, l := range dtlss {
		l.Pause()
	}
	s.relays.Pause()
	// The kernel relays on through the switch: its counts are taken once,
	// for the counter series the snapshot carries and for the successor
	// to count on from.
	if s.offload != nil {
		s.offload.Freeze()
	}
	resume := func() {
		if s.offload != nil {
			s.offload.Thaw()
		}
		s.relays.Resume()
		for _, l := range udps {
			l.Resume()
		}
		for _, l := range dtlss {
			l.Resume()
		}
		s.sweepPaused.Store(false)
	}
	snap, fds, assocs, err := s.snapshot(udps, dtlss)
	var b []byte
	if err == nil {
		b, err = takeover.Encode(snap)
	}
	if err == nil {
		err = c.SendState(b, fds)
	}
	if err == nil {
		err = c.ExpectReady()
	}
	if err != nil {
		resume()
		c.Abort(err.Error())
		s.log.Warn("hand-over: the successor failed before it confirmed; serving on", "error", err,
			"paused", time.Since(start).String())
		return false
	}
	// Confirmed: the successor serves from now on, and holds the offload's
	// maps, programs and links; this process lets go of its descriptors
	// without detaching, before it forgets the handed-over allocations
	// (whose paths must stay in the kernel).
	if s.offload != nil {
		s.offload.Release()
	}
	// TCP and TLS listeners stop accepting, so that it can open them, and
	// their connections stay here until they close (StreamConnections);
	// what else is not handed over is closed.
	s.listenersMu.Lock()
	var others []string
	var streams []*stream.Listener
	for name, l := range s.listeners {
		switch l := l.(type) {
		case pausable, *dtls.Listener:
		case *stream.Listener:
			streams = append(streams, l)
		default:
			others = append(others, name)
		}
	}
	s.listenersMu.Unlock()
	for _, l := range streams {
		l.StopAccepting()
	}
	for _, name := range others {
		s.stopListener(name, "handed over")
	}
	// The handed-over allocations are the successor's: this process stops
	// watching their relay sockets before its relay workers go on for the
	// stream connections' allocations, and forgets them. Their listener
	// sockets stay paused.
	for _, l := range udps {
		if tr, ok := l.(turn.Transport); ok {
			s.engine.ForgetTransport(tr, s.relays.Detach)
		}
	}
	// The TURN-DTLS listeners stay paused and send nothing more (no
	// close_notify when an association here ends: the successor's
	// sequence numbers are the client's now); the associations' handed-
	// over allocations are forgotten as the TURN-UDP ones.
	for _, l := range dtlss {
		l.HandedOver()
	}
	for _, c := range assocs {
		s.engine.ForgetTransport(c, s.relays.Detach)
	}
	s.relays.Resume()
	s.sweepPaused.Store(false)
	s.draining.Store(true)
	s.engine.SetDraining(true)
	s.http.Close()
	s.http = nil
	s.handoverLn.Close()
	s.ready.Store(false)
	_ = c.Bye()
	s.log.Info("handed over to the successor", "allocations", len(snap.Allocations), "listeners", len(udps),
		"dtlsListeners", len(dtlss), "dtlsAssociations", len(snap.Associations),
		"descriptors", len(fds), "snapshotBytes", len(b), "streamConnections", s.StreamConnections(),
		"paused", time.Since(start).String())
	close(s.handedOver)
	return true
}

// StreamConnections returns how many TCP and TLS client connections this
// server's listeners hold: after a hand-over, those that stay with this
// process until they close.
func (s *Server) StreamConnections() int {
	s.listenersMu.Lock()
	defer s.listenersMu.Unlock()
	n := 0
	for _, l := range s.listeners {
		if sl, ok := l.(*stream.Listener); ok {
			if cs, ok := sl.ConnStats(); ok {
				n += cs.Active
			}
		}
	}
	return n
}

// snapshot describes the TURN-UDP listeners ls and their allocations, and
// the TURN-DTLS listeners ds with their associations whose handshake was
// done and those associations' allocations, and the offload's programs
// (offloadSnapshot), and returns the descriptors in the order the snapshot
// names them and the connections of the associations. The caller has
// paused the listeners, the relays and the sweep, and frozen the offload's
// counts.
func (s *Server) snapshot(ls []pausable, ds []*dtls.Listener) (*takeover.Snapshot, []int, []*core.Conn, error) {
	st := s.engine.Settings()
	snap := &takeover.Snapshot{Created: time.Now().UnixNano(), Realm: st.Realm, NonceKey: s.engine.NonceKey(),
		StateBytes: s.engine.StateBytes()}
	var fds []int
	idx := map[turn.Transport]uint16{}
	for i, l := range ls {
		lc := l.Spec()
		ip, _ := netip.ParseAddr(lc.Address)
		socks := l.Sockets()
		snap.Listeners = append(snap.Listeners, takeover.Listener{Name: lc.Name, Address: netip.AddrPortFrom(ip.Unmap(), uint16(lc.Port)), Sockets: uint16(len(socks))})
		fds = append(fds, socks...)
		if t, ok := l.(turn.Transport); ok {
			idx[t] = uint16(i)
		}
	}
	// The TURN-DTLS listeners' sockets, and their associations by
	// connection (each the turn.Transport of its allocation).
	var dtlsFDs []int
	var conns []*core.Conn
	byConn := map[turn.Transport]int{}
	for _, l := range ds {
		fd, err := l.Socket()
		if err != nil {
			s.log.Warn("hand-over: TURN-DTLS listener socket; its associations are not handed over", "listener", l.Spec().Name, "error", err)
			continue
		}
		lc := l.Spec()
		ip, _ := netip.ParseAddr(lc.Address)
		li := uint16(len(snap.DTLSListeners))
		snap.DTLSListeners = append(snap.DTLSListeners, takeover.DTLSListener{Name: lc.Name, Address: netip.AddrPortFrom(ip.Unmap(), uint16(lc.Port))})
		dtlsFDs = append(dtlsFDs, fd)
		for _, a := range l.Associations() {
			r := a.Records
			byConn[a.Conn] = len(snap.Associations)
			conns = append(conns, a.Conn)
			snap.Associations = append(snap.Associations, takeover.Association{Listener: li, Client: a.Client, Local: a.Local,
				Suite: r.Suite, Epoch: r.Epoch, LocalKey: r.LocalKey, RemoteKey: r.RemoteKey, LocalIV: r.LocalIV, RemoteIV: r.RemoteIV,
				NextSeq: r.NextSeq, ReplayTop: r.ReplayTop, ReplayMask: r.ReplayMask})
		}
	}
	dtlsRelays := make([][]int, len(snap.Associations))
	now := time.Now()
	s.engine.Export(func(a *turn.Allocation) {
		if ai, ok := byConn[a.Transport]; ok && a.FiveTuple.Proto == turn.ProtoDTLS && len(snap.Associations[ai].Allocations) == 0 {
			key, _ := st.Auth.Key(a.Username, st.Realm, now)
			snap.Associations[ai].Allocations = []takeover.Allocation{{Key: key, AllocationState: a.State()}}
			for _, r := range a.Relays() {
				dtlsRelays[ai] = append(dtlsRelays[ai], r.Socket())
			}
			return
		}
		li, ok := idx[a.Transport]
		if !ok || a.FiveTuple.Proto != turn.ProtoUDP {
			return
		}
		key, _ := st.Auth.Key(a.Username, st.Realm, now)
		snap.Allocations = append(snap.Allocations, takeover.Allocation{Listener: li, Key: key, AllocationState: a.State()})
		for _, r := range a.Relays() {
			fds = append(fds, r.Socket())
		}
	})
	fds = append(fds, dtlsFDs...)
	for _, r := range dtlsRelays {
		fds = append(fds, r...)
	}
	snap.Slots = uint32(len(snap.Allocations))
	for _, a := range snap.Associations {
		snap.Slots += uint32(len(a.Allocations))
	}
	var metrics bytes.Buffer
	s.writeMetrics(&metrics)
	snap.Counters = counterSeries(metrics.Bytes())
	if s.offload != nil {
		o, ofds, err := offloadSnapshot(s.offload)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("offload: %w", err)
		}
		snap.Offload = o
		fds = append(fds, ofds...)
	}
	return snap, fds, conns, nil
}

// ErrNoPredecessor is Takeover's error when no ternd listens on the
// hand-over socket: its file is missing (ENOENT) or nothing accepts on it
// (ECONNREFUSED, a socket file left by a process that is gone). Nothing
// was handed over and no other process holds this config's sockets
// through that socket, so a caller may start afresh (ternd
// --takeover-or-start). Other errors (a timeout, an abort) are not it:
// a ternd may still hold the sockets.
var ErrNoPredecessor = errors.New("no ternd listens on the hand-over socket")

// TakeoverStep names a step of Takeover, for TakeoverOptions.Step.
type TakeoverStep string

// The steps of Takeover before it confirms.
const (
	StepHello    TakeoverStep = "hello"    // connected and said hello
	StepReceived TakeoverStep = "received" // descriptors and snapshot received
	StepImported TakeoverStep = "imported" // sockets adopted, allocations imported
)

// Takeover builds a Server for cfg as New does and, instead of opening its
// TURN-UDP and TURN-DTLS listeners, takes over those, their allocations
// and the TURN-DTLS associations whose handshake was done from the
// ternd that listens on the hand-over socket at path (ServeHandover). It
// returns a running server once the old process has said bye; it opens
// the listeners that were not handed over (TCP, TLS, and UDP and DTLS
// ones the old config lacked) and the health and metrics endpoints itself.
// step, when not nil, is called at each step before the confirmation (a
// test kills the process there).
//
// On an error before it confirms (the old process is not running, a
// snapshot of another version, a handed-over listener or relay address
// that this config lacks, an allocation that cannot be imported, offload
// maps that this binary's programs do not match) the old process goes on
// serving, and this one must exit: the Server it built holds sockets it
// shares with the old process and is not returned.
func Takeover(cfg *config.Config, opts Options, path string, step func(TakeoverStep)) (*Server, error) {
	if step == nil {
		step = func(TakeoverStep) {}
	}
	opts.deferOffload = true
	s, err := New(cfg, opts)
	if err != nil {
		return nil, err
	}
	c, err := takeover.Dial(path)
	if err != nil {
		// Nothing of the old process's is in s yet: closing it ends
		// nothing but its own engine (its offload, deferred, holds
		// nothing).
		s.Close()
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			err = fmt.Errorf("%w: %w", ErrNoPredecessor, err)
		}
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * handoverTimeout))
	if err := c.Hello(); err != nil {
		return nil, fmt.Errorf("hand-over: hello: %w", err)
	}
	step(StepHello)
	b, fds, err := c.RecvState()
	if err != nil {
		return nil, fmt.Errorf("hand-over: receiving sockets and snapshot: %w", err)
	}
	step(StepReceived)
	adopted, n, err := s.adopt(cfg, b, fds)
	if err != nil {
		if s.offload != nil {
			s.offload.Abandon()
		}
		c.Abort(err.Error())
		return nil, fmt.Errorf("hand-over: %w", err)
	}
	step(StepImported)
	if err := c.Ready(); err != nil {
		return nil, fmt.Errorf("hand-over: confirming: %w", err)
	}
	if err := c.ExpectBye(); errors.Is(err, takeover.ErrAborted) {
		return nil, fmt.Errorf("hand-over: %w", err)
	} else if err != nil {
		// The old process committed when it read ready; without its
		// bye it has gone: serve.
		s.log.Warn("hand-over: no bye from the old process; serving", "error", err)
	}
	s.serveAdopted(adopted)
	s.log.Info("took over", "allocations", n, "listeners", len(adopted))
	return s, nil
}

// adopt decodes the snapshot b and makes the listeners and allocations it
// describes of fds, without reading them. It returns the listeners by name
// and how many allocations it imported.
func (s *Server) adopt(cfg *config.Config, b []byte, fds []int) (map[string]adoptedListener, int, error) {
	snap, err := takeover.Decode(b)
	if err != nil {
		closeAll(fds)
		return nil, 0, err
	}
	if snap.FDs() != len(fds) {
		closeAll(fds)
		return nil, 0, fmt.Errorf("snapshot names %d descriptors, %d came", snap.FDs(), len(fds))
	}
	// The offload's descriptors follow the sockets'. Adopting checks
	// them and changes nothing in the kernel: the old process's programs
	// relay on until Activate, after its bye.
	if snap.Offload != nil {
		n := snap.Offload.FDs()
		ofds := fds[len(fds)-n:]
		fds = fds[:len(fds)-n]
		if err := s.adoptOffload(snap.Offload, ofds); err != nil {
			closeAll(fds)
			return nil, 0, err
		}
	}
	s.relays.Pause()
	s.engine.SetNonceKey(snap.NonceKey)
	carried := make(map[string]float64, len(snap.Counters))
	for _, c := range snap.Counters {
		carried[c.Series] = c.Value
	}
	s.listenersMu.Lock()
	s.carried = carried
	s.listenersMu.Unlock()
	ls := make([]*udp.Listener, len(snap.Listeners))
	adopted := map[string]adoptedListener{}
	next := 0
	for i, sl := range snap.Listeners {
		lc, ok := findListener(cfg, protocol.TURNUDP, sl.Name, sl.Address)
		if !ok {
			return nil, 0, fmt.Errorf("listener %q (TURN-UDP %s) was handed over, but this config has no such listener", sl.Name, sl.Address)
		}
		al, err := allowlist.Build(lc.Routes, cfg.Clusters, s.ownAddrs(cfg), s.dns.Lookup, &s.clusterIDs)
		if err != nil {
			return nil, 0, fmt.Errorf("listener %q: %w", lc.Name, err)
		}
		l, err := udp.Adopt(s.listenerEnv(cfg), lc, al, fds[next:next+int(sl.Sockets)])
		if err != nil {
			return nil, 0, err
		}
		next += int(sl.Sockets)
		ls[i], adopted[lc.Name] = l, l
	}
	st := s.engine.Settings()
	now := time.Now()
	stale := 0
	for _, a := range snap.Allocations {
		relayFDs := fds[next : next+len(a.Relays)]
		next += len(a.Relays)
		_, err := s.engine.Import(a.AllocationState, ls[a.Listener], func(al *turn.Allocation) ([]turn.Relay, error) {
			var rs []turn.Relay
			for j, fd := range relayFDs {
				r, err := s.relays.Adopt(al, fd, a.Relays[j])
				if err != nil {
					for _, r := range rs {
						_ = r.Close()
					}
					return nil, err
				}
				rs = append(rs, r)
			}
			return rs, nil
		})
		if err != nil {
			return nil, 0, err
		}
		if key, ok := st.Auth.Key(a.Username, st.Realm, now); len(a.Key) > 0 && (!ok || !bytes.Equal(key, a.Key) || snap.Realm != st.Realm) {
			stale++
		}
	}
	n, err := s.adoptDTLS(cfg, snap, fds[next:], adopted)
	if err != nil {
		return nil, 0, err
	}
	stale += n
	if stale > 0 {
		s.log.Warn("hand-over: allocations whose credentials this config keys otherwise; their clients' next requests get 401", "allocations", stale)
	}
	if got := s.engine.Allocations(); got != int(snap.Slots) {
		return nil, 0, fmt.Errorf("imported %d allocations of %d", got, snap.Slots)
	}
	s.log.Info("hand-over: imported", "allocations", snap.Slots, "dtlsAssociations", len(snap.Associations), "stateBytes", s.engine.StateBytes(),
		"stateBytesBefore", snap.StateBytes, "snapshotAge", time.Since(time.Unix(0, snap.Created)).String())
	return adopted, int(snap.Slots), nil
}

// adoptedListener is a listener taken over, which reads nothing until
// Resume: TURN-UDP (*udp.Listener) or TURN-DTLS (*dtls.Listener).
type adoptedListener interface {
	listener.Listener
	Resume()
}

// adoptDTLS makes the TURN-DTLS listeners of snap of their descriptors
// fds (each listener's socket, then the relay sockets of its
// associations' allocations, in the snapshot's order), with their
// associations, and imports those associations' allocations. It adds the
// listeners to adopted and returns how many allocations' credentials this
// config keys otherwise.
func (s *Server) adoptDTLS(cfg *config.Config, snap *takeover.Snapshot, fds []int, adopted map[string]adoptedListener) (int, error) {
	relayFDs := fds[len(snap.DTLSListeners):]
	st := s.engine.Settings()
	now := time.Now()
	stale := 0
	for i, sl := range snap.DTLSListeners {
		lc, ok := findListener(cfg, protocol.TURNDTLS, sl.Name, sl.Address)
		if !ok {
			return 0, fmt.Errorf("listener %q (TURN-DTLS %s) was handed over, but this config has no such listener", sl.Name, sl.Address)
		}
		al, err := allowlist.Build(lc.Routes, cfg.Clusters, s.ownAddrs(cfg), s.dns.Lookup, &s.clusterIDs)
		if err != nil {
			return 0, fmt.Errorf("listener %q: %w", lc.Name, err)
		}
		var as []dtls.Association
		var idx []int
		for j, a := range snap.Associations {
			if int(a.Listener) == i {
				as = append(as, dtls.Association{Client: a.Client, Local: a.Local, Records: record.State{Suite: a.Suite, Epoch: a.Epoch,
					LocalKey: a.LocalKey, RemoteKey: a.RemoteKey, LocalIV: a.LocalIV, RemoteIV: a.RemoteIV,
					NextSeq: a.NextSeq, ReplayTop: a.ReplayTop, ReplayMask: a.ReplayMask}})
				idx = append(idx, j)
			}
		}
		l, conns, err := dtls.Adopt(s.listenerEnv(cfg), lc, al, fds[i], as)
		if err != nil {
			return 0, err
		}
		adopted[lc.Name] = l
		// Relay sockets come in the order of all associations; find
		// where each of this listener's starts.
		for k, j := range idx {
			off := 0
			for _, a := range snap.Associations[:j] {
				for _, al := range a.Allocations {
					off += len(al.Relays)
				}
			}
			for _, a := range snap.Associations[j].Allocations {
				rfds := relayFDs[off : off+len(a.Relays)]
				off += len(a.Relays)
				_, err := s.engine.Import(a.AllocationState, conns[k], func(al *turn.Allocation) ([]turn.Relay, error) {
					var rs []turn.Relay
					for r, fd := range rfds {
						rl, err := s.relays.Adopt(al, fd, a.Relays[r])
						if err != nil {
							for _, rl := range rs {
								_ = rl.Close()
							}
							return nil, err
						}
						rs = append(rs, rl)
					}
					return rs, nil
				})
				if err != nil {
					return 0, err
				}
				if key, ok := st.Auth.Key(a.Username, st.Realm, now); len(a.Key) > 0 && (!ok || !bytes.Equal(key, a.Key) || snap.Realm != st.Realm) {
					stale++
				}
			}
		}
	}
	return stale, nil
}

// findListener returns the listener of cfg of protocol p, name and
// address that a handed-over listener was.
func findListener(cfg *config.Config, p protocol.Protocol, name string, addr netip.AddrPort) (config.Listener, bool) {
	for _, lc := range cfg.Listeners {
		ip, err := netip.ParseAddr(lc.Address)
		if lc.Name == name && lc.Protocol == p && err == nil &&
			netip.AddrPortFrom(ip.Unmap(), uint16(lc.Port)) == addr {
			return lc, true
		}
	}
	return config.Listener{}, false
}

// serveAdopted starts serving after a hand-over: the adopted listeners and
// the relays read again at once, then what Start opens follows.
func (s *Server) serveAdopted(adopted map[string]adoptedListener) {
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	s.mu.Lock()
	cfg := s.cfg
	s.mu.Unlock()
	s.listenersMu.Lock()
	for name, l := range adopted {
		s.listeners[name] = l
	}
	s.listenersMu.Unlock()
	// The kernel's entries become this process's before its sockets are
	// read: what it withdraws from then on leaves the kernel. A reopen
	// for another config waits until the sockets relay again.
	reopen := s.offload != nil && s.offload.Activate()
	for _, l := range adopted {
		l.Resume()
	}
	s.relays.Resume()
	if reopen {
		s.offload.Reopen()
	}
	s.bg.Add(2)
	go s.background()
	go s.balance()
	s.secrets = s.watchSecrets(secretfile.Files(cfg.Auth))
	var err error
	if s.http, err = s.startAdminAfterHandover(cfg.Admin); err != nil {
		s.log.Error("health and metrics endpoints failed to start", "error", err)
	}
	s.dns.SetClusters(cfg.Clusters)
	var rest []config.Listener
	for _, lc := range cfg.Listeners {
		if adopted[lc.Name] == nil {
			rest = append(rest, lc)
		}
	}
	if err := s.startListeners(cfg, rest); err != nil {
		s.log.Error("some listeners failed to start after the hand-over", "error", err)
	}
	s.ready.Store(s.running() > 0)
}

// adminBindRetry bounds how long a successor retries binding the health
// and metrics endpoints that the old process held: it closes them before
// its bye, but on a shared network namespace (hostNetwork pods, one host)
// a port another process holds a moment longer must not leave the new one
// without probes.
const adminBindRetry = 5 * time.Second

// startAdminAfterHandover starts the health and metrics endpoints, trying
// again every 100 ms for up to adminBindRetry while an address is in use.
func (s *Server) startAdminAfterHandover(a config.Admin) (*admin.Endpoints, error) {
	deadline := time.Now().Add(adminBindRetry)
	for {
		e, err := s.startAdmin(a)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return e, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}
