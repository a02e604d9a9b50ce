package dataplane

import (
	"net/netip"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/turn"
)

// listenerSlot is the largest client datagram a listener worker reads, in
// bytes; larger ones are dropped as truncated. It fits jumbo frames.
const listenerSlot = 9216

// udpSocket is one SO_REUSEPORT socket of a UDP listener and its worker.
type udpSocket struct {
	fd    int
	l     *udpListener
	stats workerStats
}

func openUDPSocket(addr netip.AddrPort, bufSize int) (*udpSocket, error) {
	fd, err := socketFor(addr, false, true)
	if err != nil {
		return nil, err
	}
	if bufSize > 0 {
		setBuffers(fd, bufSize)
	}
	// A receive timeout lets a blocked worker notice a close even if the
	// shutdown wake-up is missed.
	tv := unix.Timeval{Sec: 1}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return &udpSocket{fd: fd}, nil
}

// serve is the listener worker: on its own locked OS thread it reads a
// batch with recvmmsg (blocking for the first datagram only), runs the
// engine on each packet and writes what the batch produced with sendmmsg:
// replies on this socket, relayed payloads grouped per relay socket.
// Nothing here allocates per packet.
func (s *udpSocket) serve() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var (
		l   = s.l
		eng = l.srv.engine
		st  = &s.stats
		rb  = newRecvBatch(batchSize, 0, listenerSlot, 0)
		sb  = newMsgBatch(batchSize)
		res turn.Result
	)
	for {
		n, err := rb.recv(s.fd, unix.MSG_WAITFORONE, true)
		if l.closed.Load() {
			return
		}
		if err != nil || n == 0 {
			continue // EAGAIN from the receive timeout, EINTR
		}
		var rxBytes, txBytes, peerTx, peerTxBytes uint64
		for i := 0; i < n; i++ {
			size := int(rb.hdrs[i].Len)
			rxBytes += uint64(size)
			if rb.truncated(i) {
				st.drops[turn.DropMalformed].Add(1)
				continue
			}
			from := rb.from(i)
			ft := turn.FiveTuple{Client: from, Server: l.addr, Proto: turn.ProtoUDP}
			eng.HandleClient(l, ft, rb.bufs[i][:size], &res)
			switch res.Kind {
			case turn.Reply:
				sb.add(s.fd, res.Reply, from)
				txBytes += uint64(len(res.Reply))
			case turn.Forward:
				if r := forwardRelay(&res); r != nil {
					sb.add(r.sock.fd, res.Payload, res.Peer)
					peerTx++
					peerTxBytes += uint64(len(res.Payload))
				}
			default:
				st.drops[res.Drop].Add(1)
			}
		}
		st.rx.Add(uint64(n))
		st.rxBytes.Add(rxBytes)
		st.peerTx.Add(peerTx)
		st.peerTxBytes.Add(peerTxBytes)
		if sb.n > 0 {
			// Replies and forwards share the batch; the counters above
			// count forwards, tx counts replies.
			replies := sb.n - int(peerTx)
			sb.flush()
			st.tx.Add(uint64(replies))
			st.txBytes.Add(txBytes)
		}
	}
}

// shutdown wakes the worker blocked in recvmmsg.
func (s *udpSocket) shutdown() { _ = unix.Shutdown(s.fd, unix.SHUT_RD) }

func (s *udpSocket) close() { _ = unix.Close(s.fd) }
