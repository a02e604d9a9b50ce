// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Tern's ChannelData fast path (docs/offload.md). Two directions:
//
//   client -> peer: ChannelData from a client to a TURN-UDP listener whose
//   (client, listener, channel) has an entry in c2p loses its 4-byte header
//   and leaves from the relay address to the peer.
//
//   peer -> client: a datagram from a peer to a relay address whose (peer,
//   relay) has an entry in p2c gains the 4-byte header and leaves from the
//   listener to the client.
//
// Everything else returns TC_ACT_OK / XDP_PASS untouched so that the socket
// path (and the TURN engine) sees it. The programs never drop a packet.
//
// The headers stay where they are in the buffer and the payload moves by 4
// bytes instead: a tc skb that a local socket sent through a veth is
// CHECKSUM_PARTIAL, and its csum_start must keep pointing at the UDP header.

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define AF_INET 2
#define AF_INET6 10
#define MAX_PATHS 65536
#define MAX_COUNTERS 4096
#define CHUNK 256
#define MAX_CHUNKS 8 /* payloads up to 2048 bytes move; longer ones pass */
#define IP_DF 0x4000
#define TTL 64

// Offsets in the packet. The functions below take v6 as a constant
// argument and are always inlined, so each family gets its own code.
#define L3_OFF ETH_HLEN
#define L3_LEN(v6) ((v6) ? sizeof(struct ipv6hdr) : sizeof(struct iphdr))
#define L4_OFF(v6) (ETH_HLEN + L3_LEN(v6))
#define PL_OFF(v6) (L4_OFF(v6) + sizeof(struct udphdr))
#define IP_CSUM_OFF (L3_OFF + __builtin_offsetof(struct iphdr, check))
#define UDP_CSUM_OFF(v6) (L4_OFF(v6) + __builtin_offsetof(struct udphdr, check))

// BPF_F_IPV6 for bpf_l4_csum_replace on IPv6 (Linux 6.16 on; older
// kernels refuse the flag). Open sets it where the kernel has it.
const volatile __u64 l4_csum_ipv6_flag = 0;

// Addresses are 16 bytes so that IPv6 fits the same maps; an IPv4 address
// fills the first 4 bytes and the rest are zero. Ports and the channel
// number are kept in network byte order, as they appear in packets.
struct c2p_key {
	__u8 client[16];
	__u8 listener[16];
	__be16 client_port;
	__be16 listener_port;
	__be16 channel;
	__u8 family;
	__u8 pad;
};

struct c2p_val {
	__u8 relay[16];
	__u8 peer[16];
	__be16 relay_port;
	__be16 peer_port;
	__u32 counter;
	__u64 expires; /* CLOCK_MONOTONIC ns */
};

struct p2c_key {
	__u8 peer[16];
	__u8 relay[16];
	__be16 peer_port;
	__be16 relay_port;
	__u8 family;
	__u8 pad[3];
};

struct p2c_val {
	__u8 client[16];
	__u8 listener[16];
	__be16 client_port;
	__be16 listener_port;
	__be16 channel;
	__u16 pad;
	__u32 counter;
	__u32 pad2;
	__u64 expires; /* CLOCK_MONOTONIC ns */
};

struct slot_counters {
	__u64 c2p_packets;
	__u64 c2p_bytes;
	__u64 p2c_packets;
	__u64 p2c_bytes;
};

// Why a packet that matched a path still went to the socket path.
enum stat {
	STAT_EXPIRED = 0,  /* the entry's expiry has passed */
	STAT_BAD_LENGTH,   /* ChannelData length longer than the datagram */
	STAT_PADDING,      /* more than 3 or non-zero padding bytes */
	STAT_TOO_BIG,      /* longer than this program moves, or over the MTU */
	STAT_NO_ROUTE,     /* bpf_fib_lookup found no way out */
	STAT_FWD_DISABLED, /* forwarding is off on the arrival interface */
	STAT_ERROR,        /* a helper failed mid-rewrite */
	STAT_MAX,
};

// The path maps allocate entries as they are added (BPF_F_NO_PREALLOC):
// preallocated, 65536 paths would charge ternd's cgroup about 20 MB of
// kernel memory before the first allocation.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PATHS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct c2p_key);
	__type(value, struct c2p_val);
} c2p SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PATHS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct p2c_key);
	__type(value, struct p2c_val);
} p2c SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_COUNTERS);
	__type(key, __u32);
	__type(value, struct slot_counters);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

// Per-interface settings, keyed by ifindex, written by Open for every
// interface the tc program is attached to (XDP does not read them).
#define IFACE_SAME_INTERFACE 1 /* send back out the arrival interface, no FIB */
#define IFACE_LOOPBACK 2       /* every destination is local: continue up */

struct iface {
	__u32 flags;
	__u32 mtu; /* the longest IP packet the interface sends */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct iface);
} ifaces SEC(".maps");

// This network namespace's addresses, as Open found them: a packet the
// same-interface mode rewrote towards one of them continues up the stack.
struct local_key {
	__u8 addr[16];
	__u8 family;
	__u8 pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct local_key);
	__type(value, __u8);
} locals SEC(".maps");

struct scratch {
	__u8 buf[2 * CHUNK]; /* twice CHUNK so that a masked length fits */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

static __always_inline void count_stat(__u32 s)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &s);
	if (v)
		*v += 1;
}

static __always_inline void count(__u32 slot, int c2p_dir, __u64 bytes)
{
	struct slot_counters *c = bpf_map_lookup_elem(&counters, &slot);
	if (!c)
		return;
	if (c2p_dir) {
		c->c2p_packets++;
		c->c2p_bytes += bytes;
	} else {
		c->p2c_packets++;
		c->p2c_bytes += bytes;
	}
}

// The IP/UDP headers of a candidate packet, copied out of the buffer.
// IPv4 addresses fill word 0 of saddr and daddr, the rest is zero, as in
// the maps' keys.
struct hdrs {
	__be32 saddr[4], daddr[4];
	__be16 sport, dport;
	__u16 udp_len; /* host order */
	__be16 ttl_proto; /* IPv4: TTL and protocol as in the header */
	__u8 tos;         /* IPv4 only */
	__u8 first[4];    /* the first 4 payload bytes, if there are 4 */
};

// parse reads an Ethernet/IPv4 (no options, not a fragment) or
// Ethernet/IPv6 (UDP right after the fixed header) UDP packet from
// [data, end) into h. It returns 4 or 6 for a candidate, -1 otherwise.
static __always_inline int parse(void *data, void *end, __u32 pkt_len, struct hdrs *h)
{
	struct ethhdr *eth = data;
	struct udphdr *udp;

	if ((void *)(eth + 1) > end)
		return -1;
	__builtin_memset(h, 0, sizeof(*h));
	int fam;
	__u32 l3len;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		udp = (void *)(ip + 1);
		if ((void *)(udp + 1) > end)
			return -1;
		if (ip->version != 4 || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
			return -1;
		if (ip->frag_off & bpf_htons(~IP_DF & 0xffff))
			return -1; /* a fragment, or reserved bit */
		h->udp_len = bpf_ntohs(udp->len);
		if (bpf_ntohs(ip->tot_len) != sizeof(*ip) + h->udp_len)
			return -1;
		h->saddr[0] = ip->saddr;
		h->daddr[0] = ip->daddr;
		h->tos = ip->tos;
		h->ttl_proto = *(__be16 *)&ip->ttl;
		fam = 4;
		l3len = sizeof(*ip);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		udp = (void *)(ip6 + 1);
		if ((void *)(udp + 1) > end)
			return -1;
		if (ip6->version != 6 || ip6->nexthdr != IPPROTO_UDP)
			return -1; /* extension headers (fragments among them) pass */
		h->udp_len = bpf_ntohs(udp->len);
		if (bpf_ntohs(ip6->payload_len) != h->udp_len)
			return -1; /* a jumbogram, or trailing bytes */
		__builtin_memcpy(h->saddr, &ip6->saddr, 16);
		__builtin_memcpy(h->daddr, &ip6->daddr, 16);
		fam = 6;
		l3len = sizeof(*ip6);
	} else {
		return -1;
	}
	if (h->udp_len < sizeof(*udp))
		return -1;
	if (ETH_HLEN + l3len + (__u32)h->udp_len > pkt_len)
		return -1;
	h->sport = udp->source;
	h->dport = udp->dest;
	__u8 *pl = (void *)(udp + 1);
	if (h->udp_len >= sizeof(*udp) + 4 && (void *)(pl + 4) <= end)
		__builtin_memcpy(h->first, pl, 4);
	return fam;
}

// fib finds the way out for a packet from src to dst of tot_len bytes
// (the whole IP packet). It returns the BPF_FIB_LKUP_RET_* code; f holds
// the egress interface and next hop.
static __always_inline int fib(void *ctx, struct bpf_fib_lookup *f, __u32 ifindex, const int v6,
			       __u8 *src, __u8 *dst, __be16 sport, __be16 dport,
			       __u16 tot_len, __u8 tos)
{
	__builtin_memset(f, 0, sizeof(*f));
	f->family = v6 ? AF_INET6 : AF_INET;
	f->l4_protocol = IPPROTO_UDP;
	f->sport = sport;
	f->dport = dport;
	f->tot_len = tot_len;
	f->ifindex = ifindex;
	if (v6) {
		__builtin_memcpy(f->ipv6_src, src, 16);
		__builtin_memcpy(f->ipv6_dst, dst, 16);
	} else {
		f->tos = tos;
		f->ipv4_src = *(__be32 *)src;
		f->ipv4_dst = *(__be32 *)dst;
	}
	return bpf_fib_lookup(ctx, f, sizeof(*f), 0);
}

// fib_verdict turns a lookup result into: 1 redirect, 0 deliver locally
// (the rewritten packet continues up this host's stack), -1 pass unchanged.
static __always_inline int fib_verdict(int rc)
{
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return 1;
	case BPF_FIB_LKUP_RET_NOT_FWDED:
		return 0;
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		count_stat(STAT_TOO_BIG);
		return -1;
	case BPF_FIB_LKUP_RET_FWD_DISABLED:
		count_stat(STAT_FWD_DISABLED);
		return -1;
	default:
		count_stat(STAT_NO_ROUTE);
		return -1;
	}
}

// The new addresses and ports of a relayed packet, and its counter.
struct out {
	__u8 saddr[16], daddr[16];
	__be16 sport, dport;
	__u32 slot;
};

// lookup_c2p finds the client->peer entry for h. It returns 1 with o
// filled, 0 for no entry, -1 for an expired one (counted).
static __always_inline int lookup_c2p(struct hdrs *h, const int v6, struct out *o)
{
	struct c2p_key k = {};
	__builtin_memcpy(k.client, h->saddr, 16);
	__builtin_memcpy(k.listener, h->daddr, 16);
	k.client_port = h->sport;
	k.listener_port = h->dport;
	__builtin_memcpy(&k.channel, h->first, 2);
	k.family = v6 ? 6 : 4;
	struct c2p_val *v = bpf_map_lookup_elem(&c2p, &k);
	if (!v)
		return 0;
	if (bpf_ktime_get_ns() >= v->expires) {
		count_stat(STAT_EXPIRED);
		return -1;
	}
	__builtin_memcpy(o->saddr, v->relay, 16);
	__builtin_memcpy(o->daddr, v->peer, 16);
	o->sport = v->relay_port;
	o->dport = v->peer_port;
	o->slot = v->counter;
	return 1;
}

// lookup_p2c is lookup_c2p for peer->client; ch gets the header to add.
static __always_inline int lookup_p2c(struct hdrs *h, const int v6, struct out *o, __be16 *channel)
{
	struct p2c_key k = {};
	__builtin_memcpy(k.peer, h->saddr, 16);
	__builtin_memcpy(k.relay, h->daddr, 16);
	k.peer_port = h->sport;
	k.relay_port = h->dport;
	k.family = v6 ? 6 : 4;
	struct p2c_val *v = bpf_map_lookup_elem(&p2c, &k);
	if (!v)
		return 0;
	if (bpf_ktime_get_ns() >= v->expires) {
		count_stat(STAT_EXPIRED);
		return -1;
	}
	__builtin_memcpy(o->saddr, v->listener, 16);
	__builtin_memcpy(o->daddr, v->client, 16);
	o->sport = v->listener_port;
	o->dport = v->client_port;
	o->slot = v->counter;
	*channel = v->channel;
	return 1;
}

// channel_length checks h's ChannelData length against its datagram and
// returns it, or -1 (counted) where the packet must pass: a length over
// the datagram, or padding of more than 3 or non-zero bytes. load reads
// the padding: 0 for tc, 1 for XDP.
static __always_inline int channel_length(void *ctx, struct hdrs *h, const int v6, const int xdp)
{
	__u16 chlen = ((__u16)h->first[2] << 8) | h->first[3];
	__u32 room = h->udp_len - sizeof(struct udphdr) - 4;
	if (chlen > room) {
		count_stat(STAT_BAD_LENGTH);
		return -1;
	}
	__u32 pad = room - chlen;
	if (pad > 3) {
		count_stat(STAT_PADDING);
		return -1;
	}
	if (pad) {
		__u8 p[4] = {};
		__u32 poff = PL_OFF(v6) + 4 + chlen;
		long err;
		/* the mask tells the verifier what the test above did; the
		 * empty asm keeps clang from dropping it as redundant */
		asm volatile("" : "+r"(pad));
		pad &= 3;
		if (pad == 0)
			return -1;
		if (xdp) {
			/* direct reads, not bpf_xdp_load_bytes (Linux 5.18):
			 * the programs load on 5.10, and a frame of a program
			 * without BPF_F_XDP_HAS_FRAGS is linear */
			struct xdp_md *x = ctx;
			__u8 *d = (void *)(long)x->data, *e = (void *)(long)x->data_end;
			/* a single-buffer frame is shorter than 16 KiB; the
			 * verifier wants the offset well under 64 KiB */
			__u8 *q = d + (poff & 0x3fff);
			err = 0;
			if (poff > 0x3fff || q + 1 > e)
				err = -1;
			else
				p[0] = q[0];
			if (!err && pad > 1) {
				if (q + 2 > e)
					err = -1;
				else
					p[1] = q[1];
			}
			if (!err && pad > 2) {
				if (q + 3 > e)
					err = -1;
				else
					p[2] = q[2];
			}
		} else {
			err = bpf_skb_load_bytes(ctx, poff, p, pad);
		}
		if (err < 0 || p[0] | p[1] | p[2]) {
			count_stat(STAT_PADDING);
			return -1;
		}
	}
	return chlen;
}

/* ---------------------------------------------------------------- tc -- */

// skb_move moves n bytes at from to to (|from-to| = 4) chunk by chunk,
// front to back when moving down, back to front when moving up.
static __always_inline int skb_move(struct __sk_buff *skb, __u32 from, __u32 to, __u32 n)
{
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return -1;
	int up = to > from;
	for (int i = 0; i < MAX_CHUNKS; i++) {
		if (n == 0)
			return 0;
		__u32 c = n > CHUNK ? CHUNK : n;
		__u32 off = up ? n - c : 0; /* offset within what remains */
		asm volatile("" : "+r"(c));
		c &= 2 * CHUNK - 1;
		if (c == 0)
			return -1;
		if (bpf_skb_load_bytes(skb, from + off, s->buf, c) < 0)
			return -1;
		if (bpf_skb_store_bytes(skb, to + off, s->buf, c, BPF_F_RECOMPUTE_CSUM) < 0)
			return -1;
		n -= c;
		if (!up) {
			from += c;
			to += c;
		}
	}
	return n == 0 ? 0 : -1;
}

// skb_rewrite_hdrs sets the IP addresses, length and TTL (hop limit) and
// the UDP ports and length in place, fixing the checksums incrementally.
// extra is the checksum difference of the payload words that came or went
// (the ChannelData header), for the UDP checksum.
static __always_inline int skb_rewrite_hdrs(struct __sk_buff *skb, struct hdrs *h, const int v6,
					    struct out *o, __u16 udp_len, __s64 extra)
{
	__be16 old_ulen = bpf_htons(h->udp_len), new_ulen = bpf_htons(udp_len);
	__u64 f = BPF_F_MARK_MANGLED_0 | (v6 ? l4_csum_ipv6_flag : 0);
	__u32 csum = UDP_CSUM_OFF(v6);
	int err = 0;

	if (v6) {
		__s64 d = bpf_csum_diff((__be32 *)h->saddr, 16, (__be32 *)o->saddr, 16, 0);
		d = bpf_csum_diff((__be32 *)h->daddr, 16, (__be32 *)o->daddr, 16, d);
		if (d < 0)
			return -1;
		err |= bpf_l4_csum_replace(skb, csum, 0, d, f | BPF_F_PSEUDO_HDR);
	} else {
		__be32 s = *(__be32 *)o->saddr, dst = *(__be32 *)o->daddr;
		__be16 old_len = bpf_htons(h->udp_len + sizeof(struct iphdr));
		__be16 new_len = bpf_htons(udp_len + sizeof(struct iphdr));
		__be16 new_ttl_proto = bpf_htons((TTL << 8) | IPPROTO_UDP);
		err |= bpf_l3_csum_replace(skb, IP_CSUM_OFF, h->saddr[0], s, 4);
		err |= bpf_l3_csum_replace(skb, IP_CSUM_OFF, h->daddr[0], dst, 4);
		err |= bpf_l3_csum_replace(skb, IP_CSUM_OFF, old_len, new_len, 2);
		err |= bpf_l3_csum_replace(skb, IP_CSUM_OFF, h->ttl_proto, new_ttl_proto, 2);
		err |= bpf_l4_csum_replace(skb, csum, h->saddr[0], s, f | BPF_F_PSEUDO_HDR | 4);
		err |= bpf_l4_csum_replace(skb, csum, h->daddr[0], dst, f | BPF_F_PSEUDO_HDR | 4);
	}
	/* the pseudo header's length, then the UDP header and payload */
	err |= bpf_l4_csum_replace(skb, csum, old_ulen, new_ulen, f | BPF_F_PSEUDO_HDR | 2);
	err |= bpf_l4_csum_replace(skb, csum, h->sport, o->sport, f | 2);
	err |= bpf_l4_csum_replace(skb, csum, h->dport, o->dport, f | 2);
	err |= bpf_l4_csum_replace(skb, csum, old_ulen, new_ulen, f | 2);
	if (extra)
		err |= bpf_l4_csum_replace(skb, csum, 0, extra, f);
	if (err)
		return -1;

	__u64 rf = BPF_F_RECOMPUTE_CSUM;
	__u8 ttl = TTL;
	if (v6) {
		__be16 plen = new_ulen;
		err |= bpf_skb_store_bytes(skb, L3_OFF + __builtin_offsetof(struct ipv6hdr, payload_len), &plen, 2, rf);
		err |= bpf_skb_store_bytes(skb, L3_OFF + __builtin_offsetof(struct ipv6hdr, hop_limit), &ttl, 1, rf);
		err |= bpf_skb_store_bytes(skb, L3_OFF + __builtin_offsetof(struct ipv6hdr, saddr), o->saddr, 16, rf);
		err |= bpf_skb_store_bytes(skb, L3_OFF + __builtin_offsetof(struct ipv6hdr, daddr), o->daddr, 16, rf);
	} else {
		__be16 tot = bpf_htons(udp_len + sizeof(struct iphdr));
		__be32 a[2] = {*(__be32 *)o->saddr, *(__be32 *)o->daddr};
		err |= bpf_skb_store_bytes(skb, L3_OFF + __builtin_offsetof(struct iphdr, tot_len), &tot, 2, rf);
		err |= bpf_skb_store_bytes(skb, L3_OFF + __builtin_offsetof(struct iphdr, ttl), &ttl, 1, rf);
		err |= bpf_skb_store_bytes(skb, L3_OFF + __builtin_offsetof(struct iphdr, saddr), a, 8, rf);
	}
	struct udphdr u = {.source = o->sport, .dest = o->dport, .len = new_ulen};
	err |= bpf_skb_store_bytes(skb, L4_OFF(v6), &u, 6, rf | BPF_F_INVALIDATE_HASH);
	return err ? -1 : 0;
}

// tc_route decides where a packet rewritten to o goes, l3_len bytes
// long: 1 out of f's interface (FIB), 2 back out the arrival interface
// (same-interface mode, no FIB lookup and so no forwarding check), 0 up
// this host's stack, -1 pass unchanged (counted).
static __always_inline int tc_route(struct __sk_buff *skb, struct bpf_fib_lookup *f, const int v6,
				    struct out *o, __u16 l3_len, __u8 tos)
{
	__u32 idx = skb->ingress_ifindex;
	struct iface *ifc = bpf_map_lookup_elem(&ifaces, &idx);
	if (ifc && (ifc->flags & IFACE_SAME_INTERFACE)) {
		if (ifc->flags & IFACE_LOOPBACK)
			return 0;
		/* A destination on this host: the rewritten packet would come
		 * up the stack from a non-loopback interface with a local
		 * source address, which the stack drops as martian; the socket
		 * path relays it. */
		struct local_key k = {};
		__builtin_memcpy(k.addr, o->daddr, 16);
		k.family = v6 ? 6 : 4;
		if (bpf_map_lookup_elem(&locals, &k))
			return -1;
		if (l3_len > ifc->mtu) {
			count_stat(STAT_TOO_BIG);
			return -1;
		}
		return 2;
	}
	return fib_verdict(fib(skb, f, idx, v6, o->saddr, o->daddr, o->sport, o->dport, l3_len, tos));
}

static __always_inline int tc_redirect(struct __sk_buff *skb, struct bpf_fib_lookup *f, int verdict,
				       const int v6)
{
	if (verdict == 0)
		return TC_ACT_OK; /* the destination is this host: continue up */
	if (verdict == 2) /* the kernel finds the next hop on the way back out */
		return bpf_redirect_neigh(skb->ingress_ifindex, 0, 0, 0);
	struct bpf_redir_neigh nh = {.nh_family = f->family};
	if (f->family == AF_INET6)
		__builtin_memcpy(nh.ipv6_nh, f->ipv6_dst, 16);
	else
		nh.ipv4_nh = f->ipv4_dst;
	return bpf_redirect_neigh(f->ifindex, &nh, sizeof(nh), 0);
}

// tc_c2p relays client->peer. It returns -1 where no entry matches (the
// caller tries p2c), else the verdict.
static __always_inline int tc_c2p(struct __sk_buff *skb, struct hdrs *h, const int v6)
{
	struct out o;
	int m = lookup_c2p(h, v6, &o);
	if (m == 0)
		return -1;
	if (m < 0)
		return TC_ACT_OK;
	int chlen = channel_length(skb, h, v6, 0);
	if (chlen < 0)
		return TC_ACT_OK;
	if (chlen > CHUNK * MAX_CHUNKS) {
		count_stat(STAT_TOO_BIG);
		return TC_ACT_OK;
	}
	__u16 udp_len = sizeof(struct udphdr) + chlen;

	struct bpf_fib_lookup f;
	int verdict = tc_route(skb, &f, v6, &o, L3_LEN(v6) + udp_len, h->tos);
	if (verdict < 0)
		return TC_ACT_OK;

	/* From here on the packet is changed: a failure drops it. */
	__be32 hdr;
	__builtin_memcpy(&hdr, h->first, 4);
	if (skb_move(skb, PL_OFF(v6) + 4, PL_OFF(v6), chlen) < 0 ||
	    bpf_skb_change_tail(skb, L4_OFF(v6) + udp_len, 0) < 0 ||
	    skb_rewrite_hdrs(skb, h, v6, &o, udp_len, bpf_csum_diff(&hdr, 4, 0, 0, 0)) < 0) {
		count_stat(STAT_ERROR);
		return TC_ACT_SHOT;
	}
	count(o.slot, 1, chlen);
	return tc_redirect(skb, &f, verdict, v6);
}

static __always_inline int tc_p2c(struct __sk_buff *skb, struct hdrs *h, const int v6)
{
	struct out o;
	__be16 channel;
	int m = lookup_p2c(h, v6, &o, &channel);
	if (m <= 0)
		return TC_ACT_OK;
	__u32 plen = h->udp_len - sizeof(struct udphdr);
	if (plen > CHUNK * MAX_CHUNKS) {
		count_stat(STAT_TOO_BIG);
		return TC_ACT_OK;
	}
	__u16 udp_len = sizeof(struct udphdr) + 4 + plen;
	struct {
		__be16 channel;
		__be16 len;
	} ch = {channel, bpf_htons(plen)};

	struct bpf_fib_lookup f;
	int verdict = tc_route(skb, &f, v6, &o, L3_LEN(v6) + udp_len, h->tos);
	if (verdict < 0)
		return TC_ACT_OK;

	__u32 new_len = L4_OFF(v6) + udp_len;
	if ((new_len > skb->len && bpf_skb_change_tail(skb, new_len, 0) < 0) ||
	    skb_move(skb, PL_OFF(v6), PL_OFF(v6) + 4, plen) < 0 ||
	    (new_len < skb->len && bpf_skb_change_tail(skb, new_len, 0) < 0) ||
	    bpf_skb_store_bytes(skb, PL_OFF(v6), &ch, 4, BPF_F_RECOMPUTE_CSUM) < 0 ||
	    skb_rewrite_hdrs(skb, h, v6, &o, udp_len, bpf_csum_diff(0, 0, (__be32 *)&ch, 4, 0)) < 0) {
		count_stat(STAT_ERROR);
		return TC_ACT_SHOT;
	}
	count(o.slot, 0, plen);
	return tc_redirect(skb, &f, verdict, v6);
}

static __always_inline int tc_family(struct __sk_buff *skb, struct hdrs *h, const int v6)
{
	if ((h->first[0] & 0xc0) == 0x40 && h->udp_len >= sizeof(struct udphdr) + 4) {
		int rc = tc_c2p(skb, h, v6);
		if (rc >= 0)
			return rc;
	}
	return tc_p2c(skb, h, v6);
}

SEC("tc")
int tern_tc(struct __sk_buff *skb)
{
	if (skb->protocol != bpf_htons(ETH_P_IP) && skb->protocol != bpf_htons(ETH_P_IPV6))
		return TC_ACT_OK;
	if (skb->gso_size)
		return TC_ACT_OK; /* a GRO train of datagrams, not one */
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	__u32 want = PL_OFF(skb->protocol == bpf_htons(ETH_P_IPV6)) + 4;
	if (data + want > end && skb->len > ETH_HLEN) {
		/* make the headers and the ChannelData header direct-readable */
		bpf_skb_pull_data(skb, skb->len < want ? skb->len : want);
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
	}
	struct hdrs h;
	int fam = parse(data, end, skb->len, &h);
	if (fam == 4)
		return tc_family(skb, &h, 0);
	if (fam == 6)
		return tc_family(skb, &h, 1);
	return TC_ACT_OK;
}

/* --------------------------------------------------------------- xdp -- */

// XDP sees frames, not skbs: there is no CHECKSUM_PARTIAL state, so the
// UDP checksum in the frame is taken as a full one (or 0 for none), and
// the headers move instead of the payload (bpf_xdp_adjust_head).

struct frame_hdrs {
	__u8 pad[2]; /* aligns the IP header to 4 bytes */
	struct ethhdr eth;
	union {
		struct {
			struct iphdr ip;
			struct udphdr udp;
		} v4;
		struct {
			struct ipv6hdr ip;
			struct udphdr udp;
		} v6;
	};
};

#define FRAME_HDRS(v6) (L4_OFF(v6) + sizeof(struct udphdr))

static __always_inline __u16 fold(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)s;
}

static __always_inline __u16 ip_csum(struct iphdr *ip)
{
	__u16 *w = (__u16 *)ip;
	__u32 s = 0;
	ip->check = 0;
#pragma unroll
	for (int i = 0; i < (int)(sizeof(*ip) / 2); i++)
		s += w[i];
	return ~fold(s);
}

// The UDP checksum words that change: pseudo-header addresses and length,
// the header's ports and length, and the ChannelData header (0 where it is
// absent). IPv4 uses the first word of each address only.
struct udp_words {
	__be32 plen; /* pseudo-header length as a 32-bit word */
	__be16 sport, dport;
	__be32 ulen; /* header length, the checksum field left out */
	__be32 chdr;
	__be32 saddr[4], daddr[4];
};

static __always_inline __be16 udp_csum_update(__be16 old, struct udp_words *from, struct udp_words *to,
					      const int v6)
{
	if (old == 0 && !v6)
		return 0; /* no checksum over IPv4: there is still none */
	__s64 d = bpf_csum_diff((__be32 *)from, 16, (__be32 *)to, 16, ~(__u32)(__u16)old & 0xffff);
	if (v6) {
		d = bpf_csum_diff(from->saddr, 32, to->saddr, 32, d);
	} else {
		d = bpf_csum_diff(from->saddr, 4, to->saddr, 4, d);
		d = bpf_csum_diff(from->daddr, 4, to->daddr, 4, d);
	}
	if (d < 0)
		return 0;
	__u16 c = ~fold((__u64)d);
	return c ? c : 0xffff;
}

// xdp_rewrite builds the new headers in fh from the old ones.
static __always_inline void xdp_rewrite(struct frame_hdrs *fh, struct hdrs *h, const int v6,
					struct out *o, __u16 udp_len, __be32 chdr_from, __be32 chdr_to)
{
	struct udp_words from = {bpf_htonl(h->udp_len), h->sport, h->dport, bpf_htonl((__u32)h->udp_len << 16),
				 chdr_from};
	struct udp_words to = {bpf_htonl(udp_len), o->sport, o->dport, bpf_htonl((__u32)udp_len << 16), chdr_to};
	__builtin_memcpy(from.saddr, h->saddr, 16);
	__builtin_memcpy(from.daddr, h->daddr, 16);
	__builtin_memcpy(to.saddr, o->saddr, 16);
	__builtin_memcpy(to.daddr, o->daddr, 16);
	struct udphdr *udp = v6 ? &fh->v6.udp : &fh->v4.udp;
	udp->check = udp_csum_update(udp->check, &from, &to, v6);
	udp->source = o->sport;
	udp->dest = o->dport;
	udp->len = bpf_htons(udp_len);
	if (v6) {
		__builtin_memcpy(&fh->v6.ip.saddr, o->saddr, 16);
		__builtin_memcpy(&fh->v6.ip.daddr, o->daddr, 16);
		fh->v6.ip.payload_len = bpf_htons(udp_len);
		fh->v6.ip.hop_limit = TTL;
	} else {
		fh->v4.ip.saddr = *(__be32 *)o->saddr;
		fh->v4.ip.daddr = *(__be32 *)o->daddr;
		fh->v4.ip.tot_len = bpf_htons(udp_len + sizeof(struct iphdr));
		fh->v4.ip.ttl = TTL;
		fh->v4.ip.check = ip_csum(&fh->v4.ip);
	}
}

// xdp_out finishes a rewritten frame: to the next hop when the lookup
// found one, up this host's stack when the destination is local.
static __always_inline int xdp_out(struct ethhdr *eth, struct bpf_fib_lookup *f, int verdict)
{
	if (verdict == 0)
		return XDP_PASS;
	__builtin_memcpy(eth->h_dest, f->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, f->smac, ETH_ALEN);
	return bpf_redirect(f->ifindex, 0);
}

static __always_inline int xdp_fib_verdict(int rc)
{
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		/* XDP cannot resolve a neighbour; the socket path will. */
		count_stat(STAT_NO_ROUTE);
		return -1;
	}
	return fib_verdict(rc);
}

// xdp_finish writes fh (and the ChannelData header when add) at the
// frame's new start, trims the frame to its new length and sends it.
static __always_inline int xdp_finish(struct xdp_md *ctx, struct frame_hdrs *fh, const int v6, __u16 udp_len,
				      int add, __be32 chdr, struct bpf_fib_lookup *f, int verdict)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	if (data + FRAME_HDRS(v6) > end) {
		count_stat(STAT_ERROR);
		return XDP_DROP;
	}
	__builtin_memcpy(data, &fh->eth, FRAME_HDRS(v6));
	if (add) {
		if (data + FRAME_HDRS(v6) + 4 > end) {
			count_stat(STAT_ERROR);
			return XDP_DROP;
		}
		__builtin_memcpy(data + FRAME_HDRS(v6), &chdr, 4);
	}
	int extra = (int)(end - data) - (int)(L4_OFF(v6) + udp_len);
	if (extra > 0 && bpf_xdp_adjust_tail(ctx, -extra) < 0) {
		count_stat(STAT_ERROR);
		return XDP_DROP;
	}
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + sizeof(struct ethhdr) > end) {
		count_stat(STAT_ERROR);
		return XDP_DROP;
	}
	return xdp_out(data, f, verdict);
}

static __always_inline int xdp_c2p(struct xdp_md *ctx, struct hdrs *h, const int v6)
{
	struct out o;
	int m = lookup_c2p(h, v6, &o);
	if (m == 0)
		return -1;
	if (m < 0)
		return XDP_PASS;
	int chlen = channel_length(ctx, h, v6, 1);
	if (chlen < 0)
		return XDP_PASS;
	__u16 udp_len = sizeof(struct udphdr) + chlen;

	struct bpf_fib_lookup f;
	int verdict = xdp_fib_verdict(fib(ctx, &f, ctx->ingress_ifindex, v6, o.saddr, o.daddr, o.sport,
					  o.dport, L3_LEN(v6) + udp_len, h->tos));
	if (verdict < 0)
		return XDP_PASS;

	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct frame_hdrs fh;
	if (data + FRAME_HDRS(v6) > end)
		return XDP_PASS;
	__builtin_memcpy(&fh.eth, data, FRAME_HDRS(v6));
	__be32 chdr;
	__builtin_memcpy(&chdr, h->first, 4);
	xdp_rewrite(&fh, h, v6, &o, udp_len, chdr, 0);

	/* From here on the frame is changed: a failure drops it. */
	if (bpf_xdp_adjust_head(ctx, 4) < 0) {
		count_stat(STAT_ERROR);
		return XDP_DROP;
	}
	int rc = xdp_finish(ctx, &fh, v6, udp_len, 0, 0, &f, verdict);
	if (rc != XDP_DROP)
		count(o.slot, 1, chlen);
	return rc;
}

static __always_inline int xdp_p2c(struct xdp_md *ctx, struct hdrs *h, const int v6)
{
	struct out o;
	__be16 channel;
	int m = lookup_p2c(h, v6, &o, &channel);
	if (m <= 0)
		return XDP_PASS;
	__u32 plen = h->udp_len - sizeof(struct udphdr);
	if (plen > 0xffff - 64) {
		count_stat(STAT_TOO_BIG);
		return XDP_PASS;
	}
	__u16 udp_len = sizeof(struct udphdr) + 4 + plen;
	struct {
		__be16 channel;
		__be16 len;
	} ch = {channel, bpf_htons(plen)};
	__be32 chdr;
	__builtin_memcpy(&chdr, &ch, 4);

	struct bpf_fib_lookup f;
	int verdict = xdp_fib_verdict(fib(ctx, &f, ctx->ingress_ifindex, v6, o.saddr, o.daddr, o.sport,
					  o.dport, L3_LEN(v6) + udp_len, h->tos));
	if (verdict < 0)
		return XDP_PASS;

	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct frame_hdrs fh;
	if (data + FRAME_HDRS(v6) > end)
		return XDP_PASS;
	__builtin_memcpy(&fh.eth, data, FRAME_HDRS(v6));
	xdp_rewrite(&fh, h, v6, &o, udp_len, 0, chdr);

	if (bpf_xdp_adjust_head(ctx, -4) < 0) {
		count_stat(STAT_TOO_BIG); /* no headroom: nothing changed yet */
		return XDP_PASS;
	}
	int rc = xdp_finish(ctx, &fh, v6, udp_len, 1, chdr, &f, verdict);
	if (rc != XDP_DROP)
		count(o.slot, 0, plen);
	return rc;
}

static __always_inline int xdp_family(struct xdp_md *ctx, struct hdrs *h, const int v6)
{
	if ((h->first[0] & 0xc0) == 0x40 && h->udp_len >= sizeof(struct udphdr) + 4) {
		int rc = xdp_c2p(ctx, h, v6);
		if (rc >= 0)
			return rc;
	}
	return xdp_p2c(ctx, h, v6);
}

SEC("xdp")
int tern_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct hdrs h;
	int fam = parse(data, end, (__u32)(end - data), &h);
	if (fam == 4)
		return xdp_family(ctx, &h, 0);
	if (fam == 6)
		return xdp_family(ctx, &h, 1);
	return XDP_PASS;
}

// tern_xdp_pass lets a veth accept frames that XDP redirects into its
// peer: veth delivers redirected frames only to a peer with an XDP
// program (or GRO) on. Tern does not attach it; tests and benchmarks do.
SEC("xdp")
int tern_xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
