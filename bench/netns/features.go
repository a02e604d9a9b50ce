//go:build linux

package netns

import (
	"fmt"
	"strings"

	"github.com/safchain/ethtool"
)

// udpSegmentation is the device feature (ethtool -K DEV tx-udp-segmentation)
// that lets a UDP GSO packet leave a device whole (NETIF_F_GSO_UDP_L4).
const udpSegmentation = "tx-udp-segmentation"

// SetFeature turns the ethtool feature name (as `ethtool -k` spells it) of
// device dev in namespace ns on or off through the ethtool ioctl
// (SIOCETHTOOL, ETHTOOL_SFEATURES) and reads it back: an error if the
// device refuses the change (a fixed feature). It touches nothing outside ns.
func SetFeature(ns, dev, name string, on bool) error {
	return SetFeatures(ns, dev, map[string]bool{name: on})
}

// SetFeatures is SetFeature of several features at once.
func SetFeatures(ns, dev string, want map[string]bool) error {
	return Do(ns, func() error {
		e, err := ethtool.NewEthtool()
		if err != nil {
			return fmt.Errorf("netns: ethtool: %w", err)
		}
		defer e.Close()
		if err := e.Change(dev, want); err != nil {
			return fmt.Errorf("netns: ethtool -K %s %v in %s: %w", dev, want, ns, err)
		}
		for name, on := range want {
			got, err := feature(e, ns, dev, name)
			if err != nil {
				return err
			}
			if got != on {
				return fmt.Errorf("netns: %s of %s in %s stayed %v", name, dev, ns, onOff(got))
			}
		}
		return nil
	})
}

// tcpSegmentation are the TSO features (ethtool -K DEV tso off) a device
// of this kernel has, as `ethtool -k` names them.
func tcpSegmentation(ns, dev string) ([]string, error) {
	var out []string
	err := Do(ns, func() error {
		e, err := ethtool.NewEthtool()
		if err != nil {
			return fmt.Errorf("netns: ethtool: %w", err)
		}
		defer e.Close()
		names, err := e.FeatureNames(dev)
		if err != nil {
			return fmt.Errorf("netns: ethtool -k %s in %s: %w", dev, ns, err)
		}
		for n := range names {
			if strings.HasPrefix(n, "tx-tcp") && strings.HasSuffix(n, "-segmentation") {
				out = append(out, n)
			}
		}
		return nil
	})
	return out, err
}

// Feature reports whether the ethtool feature name of device dev in
// namespace ns is on.
func Feature(ns, dev, name string) (bool, error) {
	var on bool
	err := Do(ns, func() error {
		e, err := ethtool.NewEthtool()
		if err != nil {
			return fmt.Errorf("netns: ethtool: %w", err)
		}
		defer e.Close()
		on, err = feature(e, ns, dev, name)
		return err
	})
	return on, err
}

func feature(e *ethtool.Ethtool, ns, dev, name string) (bool, error) {
	fs, err := e.Features(dev)
	if err != nil {
		return false, fmt.Errorf("netns: ethtool -k %s in %s: %w", dev, ns, err)
	}
	v, ok := fs[name]
	if !ok {
		return false, fmt.Errorf("netns: %s in %s has no feature %q", dev, ns, name)
	}
	return v, nil
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// SegmentGSO makes the kernel cut UDP GSO packets (UDP_SEGMENT sends)
// into their datagrams in software as they leave the devices the
// generator sends from, before any server sees them: it turns
// tx-udp-segmentation off on the client's and the peer's veth ends
// (veth), or on the namespace's lo (loopback, where the servers send
// too). Left on, a veth or lo hands the GSO packet on whole, and a tc
// program at the server's ingress — the offload parses one ChannelData
// per packet — would see one packet of dozens of ChannelData messages
// (ternd's own sockets segment what they receive, so only the kernel path
// is affected). The settings are the namespaces' devices' own and go with
// them.
func (t *Topology) SegmentGSO() error {
	devs := [][2]string{{t.Client, "tobc"}, {t.Peer, "tobp"}}
	if t.Kind == "loopback" {
		devs = [][2]string{{t.Server, "lo"}}
	}
	for _, d := range devs {
		if err := SetFeature(d[0], d[1], udpSegmentation, false); err != nil {
			return err
		}
	}
	return nil
}

// GROSink makes GRO join the runs of datagrams of one flow that reach
// the peer's veth end into one packet, for a socket that asks for them
// (UDP_GRO: ternbench's counting sink), which then takes dozens per read
// instead of one. It turns GRO on (rx-gro) on the peer's end, which makes
// veth receive there through a NAPI poll (on the CPU that sent into the
// veth); and TSO off (tcp-segmentation-offload, the TCP features only) on
// the server's end of that veth, because veth hands a packet that its
// sender did not make itself (the server's forwarded and redirected ones)
// to GRO only when the sending device has no TSO. Nothing of the relay's
// UDP path depends on TSO. Loopback topologies are left alone (lo has no
// GRO; a GSO packet there reaches a UDP_GRO socket whole anyway).
func (t *Topology) GROSink() error {
	if t.Kind != "veth" {
		return nil
	}
	tso, err := tcpSegmentation(t.Server, "tobsp")
	if err != nil {
		return err
	}
	off := map[string]bool{}
	for _, n := range tso {
		off[n] = false
	}
	if err := SetFeatures(t.Server, "tobsp", off); err != nil {
		return err
	}
	return SetFeature(t.Peer, "tobp", "rx-gro", true)
}
