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
#include <linux/udp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define AF_INET 2
#define MAX_PATHS 65536
#define MAX_COUNTERS 4096
#define CHUNK 256
#define MAX_CHUNKS 8 /* payloads up to 2048 bytes move; longer ones pass */
#define IP_DF 0x4000
#define TTL 64

#define L3_OFF ETH_HLEN
#define L4_OFF (ETH_HLEN + sizeof(struct iphdr))
#define PL_OFF (L4_OFF + sizeof(struct udphdr))
#define IP_CSUM_OFF (L3_OFF + __builtin_offsetof(struct iphdr, check))
#define UDP_CSUM_OFF (L4_OFF + __builtin_offsetof(struct udphdr, check))

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

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PATHS);
	__type(key, struct c2p_key);
	__type(value, struct c2p_val);
} c2p SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PATHS);
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

// The IPv4/UDP headers of a candidate packet, copied out of the buffer.
struct hdrs {
	__be32 saddr, daddr;
	__be16 sport, dport;
	__u16 ip_len;  /* host order */
	__u16 udp_len; /* host order */
	__be16 ttl_proto;
	__u8 tos;
	__u8 first[4]; /* the first 4 payload bytes, if there are 4 */
};

// parse reads an Ethernet/IPv4/UDP packet without options or fragments
// from [data, end) into h. It returns 0 for a candidate, -1 otherwise.
static __always_inline int parse(void *data, void *end, __u32 pkt_len, struct hdrs *h)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);
	__u8 *pl = (void *)(udp + 1);

	if ((void *)(udp + 1) > end)
		return -1;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return -1;
	if (ip->version != 4 || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
		return -1;
	if (ip->frag_off & bpf_htons(~IP_DF & 0xffff))
		return -1; /* a fragment, or reserved bit */
	h->ip_len = bpf_ntohs(ip->tot_len);
	h->udp_len = bpf_ntohs(udp->len);
	if (h->udp_len < sizeof(*udp) || h->ip_len != sizeof(*ip) + h->udp_len)
		return -1;
	if (ETH_HLEN + (__u32)h->ip_len > pkt_len)
		return -1;
	h->saddr = ip->saddr;
	h->daddr = ip->daddr;
	h->sport = udp->source;
	h->dport = udp->dest;
	h->tos = ip->tos;
	h->ttl_proto = *(__be16 *)&ip->ttl;
	if (h->udp_len >= sizeof(*udp) + 4 && (void *)(pl + 4) <= end)
		__builtin_memcpy(h->first, pl, 4);
	else
		__builtin_memset(h->first, 0, 4);
	return 0;
}

// fib finds the way out for a packet from src to dst of tot_len bytes.
// It returns the BPF_FIB_LKUP_RET_* code; fib holds the egress interface
// and next hop.
static __always_inline int fib(void *ctx, struct bpf_fib_lookup *f, __u32 ifindex,
			       __be32 src, __be32 dst, __be16 sport, __be16 dport,
			       __u16 tot_len, __u8 tos)
{
	__builtin_memset(f, 0, sizeof(*f));
	f->family = AF_INET;
	f->l4_protocol = IPPROTO_UDP;
	f->sport = sport;
	f->dport = dport;
	f->tot_len = tot_len;
	f->ifindex = ifindex;
	f->tos = tos;
	f->ipv4_src = src;
	f->ipv4_dst = dst;
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
		/* the mask tells the verifier what the min above already did;
		 * the empty asm keeps clang from dropping it as redundant */
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

// skb_rewrite_hdrs sets the IPv4 addresses, length and TTL and the UDP
// ports and length in place, fixing both checksums incrementally. extra
// is the checksum difference of the payload words that came or went (the
// ChannelData header), for the UDP checksum.
static __always_inline int skb_rewrite_hdrs(struct __sk_buff *skb, struct hdrs *h,
					    __be32 saddr, __be32 daddr, __be16 sport,
					    __be16 dport, __u16 ip_len, __s64 extra)
{
	__be16 old_len = bpf_htons(h->ip_len), new_len = bpf_htons(ip_len);
	__be16 old_ulen = bpf_htons(h->udp_len), new_ulen = bpf_htons(ip_len - sizeof(struct iphdr));
	__be16 new_ttl_proto = bpf_htons((TTL << 8) | IPPROTO_UDP);
	__u64 f = BPF_F_MARK_MANGLED_0;
	int err = 0;

	/* IP header */
	err |= bpf_l3_csum_replace(skb, IP_CSUM_OFF, h->saddr, saddr, 4);
	err |= bpf_l3_csum_replace(skb, IP_CSUM_OFF, h->daddr, daddr, 4);
	err |= bpf_l3_csum_replace(skb, IP_CSUM_OFF, old_len, new_len, 2);
	err |= bpf_l3_csum_replace(skb, IP_CSUM_OFF, h->ttl_proto, new_ttl_proto, 2);
	/* UDP pseudo header */
	err |= bpf_l4_csum_replace(skb, UDP_CSUM_OFF, h->saddr, saddr, f | BPF_F_PSEUDO_HDR | 4);
	err |= bpf_l4_csum_replace(skb, UDP_CSUM_OFF, h->daddr, daddr, f | BPF_F_PSEUDO_HDR | 4);
	err |= bpf_l4_csum_replace(skb, UDP_CSUM_OFF, old_ulen, new_ulen, f | BPF_F_PSEUDO_HDR | 2);
	/* UDP header and payload */
	err |= bpf_l4_csum_replace(skb, UDP_CSUM_OFF, h->sport, sport, f | 2);
	err |= bpf_l4_csum_replace(skb, UDP_CSUM_OFF, h->dport, dport, f | 2);
	err |= bpf_l4_csum_replace(skb, UDP_CSUM_OFF, old_ulen, new_ulen, f | 2);
	if (extra)
		err |= bpf_l4_csum_replace(skb, UDP_CSUM_OFF, 0, extra, f);
	if (err)
		return -1;

	struct {
		__be16 tot_len;
	} ipl = {new_len};
	struct {
		__be32 saddr, daddr;
	} ipa = {saddr, daddr};
	struct udphdr u = {.source = sport, .dest = dport, .len = new_ulen};
	__u8 ttl = TTL;

	err |= bpf_skb_store_bytes(skb, L3_OFF + __builtin_offsetof(struct iphdr, tot_len), &ipl, 2, BPF_F_RECOMPUTE_CSUM);
	err |= bpf_skb_store_bytes(skb, L3_OFF + __builtin_offsetof(struct iphdr, ttl), &ttl, 1, BPF_F_RECOMPUTE_CSUM);
	err |= bpf_skb_store_bytes(skb, L3_OFF + __builtin_offsetof(struct iphdr, saddr), &ipa, 8, BPF_F_RECOMPUTE_CSUM);
	err |= bpf_skb_store_bytes(skb, L4_OFF, &u, 6, BPF_F_RECOMPUTE_CSUM | BPF_F_INVALIDATE_HASH);
	return err ? -1 : 0;
}

static __always_inline int tc_redirect(struct bpf_fib_lookup *f, int verdict)
{
	if (verdict == 0)
		return TC_ACT_OK; /* the destination is this host: continue up */
	struct bpf_redir_neigh nh = {.nh_family = f->family, .ipv4_nh = f->ipv4_dst};
	return bpf_redirect_neigh(f->ifindex, &nh, sizeof(nh), 0);
}

static __always_inline int tc_c2p(struct __sk_buff *skb, struct hdrs *h)
{
	struct c2p_key k = {};
	*(__be32 *)k.client = h->saddr;
	*(__be32 *)k.listener = h->daddr;
	k.client_port = h->sport;
	k.listener_port = h->dport;
	__builtin_memcpy(&k.channel, h->first, 2);
	k.family = 4;
	struct c2p_val *v = bpf_map_lookup_elem(&c2p, &k);
	if (!v)
		return -1;
	if (bpf_ktime_get_ns() >= v->expires) {
		count_stat(STAT_EXPIRED);
		return TC_ACT_OK;
	}
	__u16 chlen = ((__u16)h->first[2] << 8) | h->first[3];
	__u32 room = h->udp_len - sizeof(struct udphdr) - 4;
	if (chlen > room) {
		count_stat(STAT_BAD_LENGTH);
		return TC_ACT_OK;
	}
	__u32 pad = room - chlen;
	if (pad > 3) {
		count_stat(STAT_PADDING);
		return TC_ACT_OK;
	}
	if (pad) {
		__u8 p[4] = {};
		__u32 poff = PL_OFF + 4 + chlen;
		asm volatile("" : "+r"(pad));
		pad &= 3;
		if (pad == 0 || bpf_skb_load_bytes(skb, poff, p, pad) < 0 || p[0] | p[1] | p[2]) {
			count_stat(STAT_PADDING);
			return TC_ACT_OK;
		}
	}
	if (chlen > CHUNK * MAX_CHUNKS) {
		count_stat(STAT_TOO_BIG);
		return TC_ACT_OK;
	}
	__be32 saddr = *(__be32 *)v->relay, daddr = *(__be32 *)v->peer;
	__be16 sport = v->relay_port, dport = v->peer_port;
	__u32 slot = v->counter;
	__u16 ip_len = sizeof(struct iphdr) + sizeof(struct udphdr) + chlen;

	struct bpf_fib_lookup f;
	int verdict = fib_verdict(fib(skb, &f, skb->ingress_ifindex, saddr, daddr, sport, dport, ip_len, h->tos));
	if (verdict < 0)
		return TC_ACT_OK;

	/* From here on the packet is changed: a failure drops it. */
	__be32 hdr;
	__builtin_memcpy(&hdr, h->first, 4);
	if (skb_move(skb, PL_OFF + 4, PL_OFF, chlen) < 0 ||
	    bpf_skb_change_tail(skb, ETH_HLEN + ip_len, 0) < 0 ||
	    skb_rewrite_hdrs(skb, h, saddr, daddr, sport, dport, ip_len,
			     bpf_csum_diff(&hdr, 4, 0, 0, 0)) < 0) {
		count_stat(STAT_ERROR);
		return TC_ACT_SHOT;
	}
	count(slot, 1, chlen);
	return tc_redirect(&f, verdict);
}

static __always_inline int tc_p2c(struct __sk_buff *skb, struct hdrs *h)
{
	struct p2c_key k = {};
	*(__be32 *)k.peer = h->saddr;
	*(__be32 *)k.relay = h->daddr;
	k.peer_port = h->sport;
	k.relay_port = h->dport;
	k.family = 4;
	struct p2c_val *v = bpf_map_lookup_elem(&p2c, &k);
	if (!v)
		return TC_ACT_OK;
	if (bpf_ktime_get_ns() >= v->expires) {
		count_stat(STAT_EXPIRED);
		return TC_ACT_OK;
	}
	__u32 plen = h->udp_len - sizeof(struct udphdr);
	if (plen > CHUNK * MAX_CHUNKS) {
		count_stat(STAT_TOO_BIG);
		return TC_ACT_OK;
	}
	__be32 saddr = *(__be32 *)v->listener, daddr = *(__be32 *)v->client;
	__be16 sport = v->listener_port, dport = v->client_port;
	__u32 slot = v->counter;
	__u16 ip_len = sizeof(struct iphdr) + sizeof(struct udphdr) + 4 + plen;
	struct {
		__be16 channel;
		__be16 len;
	} ch = {v->channel, bpf_htons(plen)};

	struct bpf_fib_lookup f;
	int verdict = fib_verdict(fib(skb, &f, skb->ingress_ifindex, saddr, daddr, sport, dport, ip_len, h->tos));
	if (verdict < 0)
		return TC_ACT_OK;

	__u32 new_len = ETH_HLEN + ip_len;
	if ((new_len > skb->len && bpf_skb_change_tail(skb, new_len, 0) < 0) ||
	    skb_move(skb, PL_OFF, PL_OFF + 4, plen) < 0 ||
	    (new_len < skb->len && bpf_skb_change_tail(skb, new_len, 0) < 0) ||
	    bpf_skb_store_bytes(skb, PL_OFF, &ch, 4, BPF_F_RECOMPUTE_CSUM) < 0 ||
	    skb_rewrite_hdrs(skb, h, saddr, daddr, sport, dport, ip_len,
			     bpf_csum_diff(0, 0, (__be32 *)&ch, 4, 0)) < 0) {
		count_stat(STAT_ERROR);
		return TC_ACT_SHOT;
	}
	count(slot, 0, plen);
	return tc_redirect(&f, verdict);
}

SEC("tc")
int tern_tc(struct __sk_buff *skb)
{
	if (skb->protocol != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	if (data + PL_OFF + 4 > end && skb->len >= PL_OFF) {
		/* make the headers and the ChannelData header direct-readable */
		bpf_skb_pull_data(skb, skb->len < PL_OFF + 4 ? PL_OFF : PL_OFF + 4);
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
	}
	struct hdrs h;
	if (parse(data, end, skb->len, &h) < 0)
		return TC_ACT_OK;
	if ((h.first[0] & 0xc0) == 0x40 && h.udp_len >= sizeof(struct udphdr) + 4) {
		int rc = tc_c2p(skb, &h);
			if (rc >= 0)
			return rc;
	}
	return tc_p2c(skb, &h);
}

/* --------------------------------------------------------------- xdp -- */

// XDP sees frames, not skbs: there is no CHECKSUM_PARTIAL state, so the
// UDP checksum in the frame is taken as a full one (or 0 for none), and
// the headers move instead of the payload (bpf_xdp_adjust_head).

struct frame_hdrs {
	__u8 pad[2]; /* aligns ip to 4 bytes */
	struct ethhdr eth;
	struct iphdr ip;
	struct udphdr udp;
};

#define FRAME_HDRS (ETH_HLEN + sizeof(struct iphdr) + sizeof(struct udphdr))

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
// the header's ports and length, and the ChannelData header (0 where it
// is absent).
struct udp_words {
	__be32 saddr, daddr;
	__be32 plen;   /* pseudo-header length as a 32-bit word */
	__be16 sport, dport;
	__be32 ulen;   /* header length, the checksum field left out */
	__be32 chdr;
};

static __always_inline __be16 udp_csum_update(__be16 old, struct udp_words *from, struct udp_words *to)
{
	if (old == 0)
		return 0; /* no checksum over IPv4: there is still none */
	__s64 d = bpf_csum_diff((__be32 *)from, sizeof(*from), (__be32 *)to, sizeof(*to),
				~(__u32)(__u16)old & 0xffff);
	if (d < 0)
		return 0;
	__u16 c = ~fold((__u64)d);
	return c ? c : 0xffff;
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

static __always_inline int xdp_c2p(struct xdp_md *ctx, struct hdrs *h)
{
	struct c2p_key k = {};
	*(__be32 *)k.client = h->saddr;
	*(__be32 *)k.listener = h->daddr;
	k.client_port = h->sport;
	k.listener_port = h->dport;
	__builtin_memcpy(&k.channel, h->first, 2);
	k.family = 4;
	struct c2p_val *v = bpf_map_lookup_elem(&c2p, &k);
	if (!v)
		return -1;
	if (bpf_ktime_get_ns() >= v->expires) {
		count_stat(STAT_EXPIRED);
		return XDP_PASS;
	}
	__u16 chlen = ((__u16)h->first[2] << 8) | h->first[3];
	__u32 room = h->udp_len - sizeof(struct udphdr) - 4;
	if (chlen > room) {
		count_stat(STAT_BAD_LENGTH);
		return XDP_PASS;
	}
	__u32 pad = room - chlen;
	if (pad > 3) {
		count_stat(STAT_PADDING);
		return XDP_PASS;
	}
	if (pad) {
		__u8 p[4] = {};
		asm volatile("" : "+r"(pad));
		pad &= 3;
		if (pad == 0 || bpf_xdp_load_bytes(ctx, PL_OFF + 4 + chlen, p, pad) < 0 || p[0] | p[1] | p[2]) {
			count_stat(STAT_PADDING);
			return XDP_PASS;
		}
	}
	__be32 saddr = *(__be32 *)v->relay, daddr = *(__be32 *)v->peer;
	__be16 sport = v->relay_port, dport = v->peer_port;
	__u32 slot = v->counter;
	__u16 ip_len = sizeof(struct iphdr) + sizeof(struct udphdr) + chlen;

	struct bpf_fib_lookup f;
	int verdict = xdp_fib_verdict(fib(ctx, &f, ctx->ingress_ifindex, saddr, daddr, sport, dport, ip_len, h->tos));
	if (verdict < 0)
		return XDP_PASS;

	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct frame_hdrs fh;
	if (data + FRAME_HDRS > end)
		return XDP_PASS;
	__builtin_memcpy(&fh.eth, data, FRAME_HDRS);

	struct udp_words from = {h->saddr, h->daddr, bpf_htonl(h->udp_len), h->sport, h->dport,
				 bpf_htonl((__u32)h->udp_len << 16), 0};
	__builtin_memcpy(&from.chdr, h->first, 4);
	__u16 ulen = ip_len - sizeof(struct iphdr);
	struct udp_words to = {saddr, daddr, bpf_htonl(ulen), sport, dport, bpf_htonl((__u32)ulen << 16), 0};
	fh.udp.check = udp_csum_update(fh.udp.check, &from, &to);
	fh.udp.source = sport;
	fh.udp.dest = dport;
	fh.udp.len = bpf_htons(ulen);
	fh.ip.saddr = saddr;
	fh.ip.daddr = daddr;
	fh.ip.tot_len = bpf_htons(ip_len);
	fh.ip.ttl = TTL;
	fh.ip.check = ip_csum(&fh.ip);

	/* From here on the frame is changed: a failure drops it. */
	if (bpf_xdp_adjust_head(ctx, 4) < 0) {
		count_stat(STAT_ERROR);
		return XDP_DROP;
	}
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + FRAME_HDRS > end) {
		count_stat(STAT_ERROR);
		return XDP_DROP;
	}
	__builtin_memcpy(data, &fh.eth, FRAME_HDRS);
	int extra = (int)(end - data) - (int)(ETH_HLEN + ip_len);
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
	count(slot, 1, chlen);
	return xdp_out(data, &f, verdict);
}

static __always_inline int xdp_p2c(struct xdp_md *ctx, struct hdrs *h)
{
	struct p2c_key k = {};
	*(__be32 *)k.peer = h->saddr;
	*(__be32 *)k.relay = h->daddr;
	k.peer_port = h->sport;
	k.relay_port = h->dport;
	k.family = 4;
	struct p2c_val *v = bpf_map_lookup_elem(&p2c, &k);
	if (!v)
		return XDP_PASS;
	if (bpf_ktime_get_ns() >= v->expires) {
		count_stat(STAT_EXPIRED);
		return XDP_PASS;
	}
	__u32 plen = h->udp_len - sizeof(struct udphdr);
	if (plen > 0xffff - 64) {
		count_stat(STAT_TOO_BIG);
		return XDP_PASS;
	}
	__be32 saddr = *(__be32 *)v->listener, daddr = *(__be32 *)v->client;
	__be16 sport = v->listener_port, dport = v->client_port;
	__u32 slot = v->counter;
	__u16 ip_len = sizeof(struct iphdr) + sizeof(struct udphdr) + 4 + plen;
	struct {
		__be16 channel;
		__be16 len;
	} ch = {v->channel, bpf_htons(plen)};

	struct bpf_fib_lookup f;
	int verdict = xdp_fib_verdict(fib(ctx, &f, ctx->ingress_ifindex, saddr, daddr, sport, dport, ip_len, h->tos));
	if (verdict < 0)
		return XDP_PASS;

	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct frame_hdrs fh;
	if (data + FRAME_HDRS > end)
		return XDP_PASS;
	__builtin_memcpy(&fh.eth, data, FRAME_HDRS);

	struct udp_words from = {h->saddr, h->daddr, bpf_htonl(h->udp_len), h->sport, h->dport,
				 bpf_htonl((__u32)h->udp_len << 16), 0};
	__u16 ulen = ip_len - sizeof(struct iphdr);
	struct udp_words to = {saddr, daddr, bpf_htonl(ulen), sport, dport, bpf_htonl((__u32)ulen << 16), 0};
	__builtin_memcpy(&to.chdr, &ch, 4);
	fh.udp.check = udp_csum_update(fh.udp.check, &from, &to);
	fh.udp.source = sport;
	fh.udp.dest = dport;
	fh.udp.len = bpf_htons(ulen);
	fh.ip.saddr = saddr;
	fh.ip.daddr = daddr;
	fh.ip.tot_len = bpf_htons(ip_len);
	fh.ip.ttl = TTL;
	fh.ip.check = ip_csum(&fh.ip);

	if (bpf_xdp_adjust_head(ctx, -4) < 0) {
		count_stat(STAT_TOO_BIG); /* no headroom: nothing changed yet */
		return XDP_PASS;
	}
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + FRAME_HDRS + 4 > end) {
		count_stat(STAT_ERROR);
		return XDP_DROP;
	}
	__builtin_memcpy(data, &fh.eth, FRAME_HDRS);
	__builtin_memcpy(data + FRAME_HDRS, &ch, 4);
	int extra = (int)(end - data) - (int)(ETH_HLEN + ip_len);
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
	count(slot, 0, plen);
	return xdp_out(data, &f, verdict);
}

SEC("xdp")
int tern_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct hdrs h;
	if (parse(data, end, (__u32)(end - data), &h) < 0)
		return XDP_PASS;
	if ((h.first[0] & 0xc0) == 0x40 && h.udp_len >= sizeof(struct udphdr) + 4) {
		int rc = xdp_c2p(ctx, &h);
		if (rc >= 0)
			return rc;
	}
	return xdp_p2c(ctx, &h);
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
