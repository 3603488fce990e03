//! Client addresses: which peer is trusted to name the client in
//! `X-Forwarded-For`, and the key an address is throttled and capped under.

use std::net::{IpAddr, Ipv6Addr};

use ipnet::IpNet;

/// Reverse proxies whose `X-Forwarded-For` is believed.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Parses IP addresses and CIDR networks; the first bad entry is the error.
    pub fn parse(entries: &[String]) -> Result<TrustedProxies, String> {
        entries
            .iter()
            .map(|e| {
                let e = e.trim();
                e.parse::<IpNet>()
                    .or_else(|_| e.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("trusted_proxies: {e:?} is not an IP address or network"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(TrustedProxies)
    }

    /// True when `ip` is one of the trusted proxies.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The client of a request from `peer` carrying these `X-Forwarded-For`
    /// header values (in order): the peer itself unless it is trusted; else
    /// the right-most forwarded address that is not itself a trusted proxy
    /// (the left-most when all are trusted). A malformed entry ends the walk
    /// at the last good hop, so a client cannot hide behind garbage.
    pub fn client(&self, peer: IpAddr, forwarded: &[&str]) -> IpAddr {
        let mut client = canonical(peer);
        if !self.contains(client) {
            return client;
        }
        let hops: Vec<&str> = forwarded
            .iter()
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect();
        for hop in hops.iter().rev() {
            let Some(ip) = parse_hop(hop) else {
                return client;
            };
            client = canonical(ip);
            if !self.contains(client) {
                return client;
            }
        }
        client
    }
}

/// An `X-Forwarded-For` entry: an address, optionally with a port
/// (`1.2.3.4:5`, `[::1]:5`).
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sa) = hop.parse::<std::net::SocketAddr>() {
        return Some(sa.ip());
    }
    None
}

/// IPv4-mapped IPv6 addresses as IPv4.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// The key an address is throttled and capped under: an IPv4 address as
/// itself, an IPv6 address as its /64 network (one host usually holds a
/// whole /64, so single IPv6 addresses would be free to rotate).
pub fn address_key(ip: IpAddr) -> String {
    match canonical(ip) {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let net = Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0);
            format!("{net}/64")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn untrusted_peers_are_the_client() {
        let proxies = TrustedProxies::parse(&["10.0.0.0/8".into()]).unwrap();
        assert_eq!(
            proxies.client(ip("192.0.2.7"), &["203.0.113.1"]),
            ip("192.0.2.7")
        );
        assert_eq!(
            TrustedProxies::default().client(ip("127.0.0.1"), &["1.2.3.4"]),
            ip("127.0.0.1")
        );
    }

    #[test]
    fn the_right_most_untrusted_hop_is_the_client() {
        let proxies = TrustedProxies::parse(&["10.0.0.0/8".into(), "127.0.0.1".into()]).unwrap();
        // The client forged the first entry; the proxies appended the rest.
        assert_eq!(
            proxies.client(ip("127.0.0.1"), &["6.6.6.6, 198.51.100.9", "10.1.2.3"]),
            ip("198.51.100.9")
        );
        assert_eq!(proxies.client(ip("10.0.0.1"), &[]), ip("10.0.0.1"));
        assert_eq!(
            proxies.client(ip("10.0.0.1"), &["10.0.0.2"]),
            ip("10.0.0.2")
        );
        assert_eq!(
            proxies.client(ip("10.0.0.1"), &["[2001:db8::1]:443"]),
            ip("2001:db8::1")
        );
        // Garbage stops the walk at the last good hop.
        assert_eq!(
            proxies.client(ip("10.0.0.1"), &["1.1.1.1, junk, 10.0.0.5"]),
            ip("10.0.0.5")
        );
    }

    #[test]
    fn bad_entries_are_refused() {
        assert!(TrustedProxies::parse(&["10.0.0.0/33".into()]).is_err());
        assert!(TrustedProxies::parse(&["proxy.example".into()]).is_err());
        assert!(TrustedProxies::parse(&["::1".into(), "fd00::/8".into()]).is_ok());
    }

    #[test]
    fn keys() {
        assert_eq!(address_key(ip("127.0.0.2")), "127.0.0.2");
        assert_eq!(address_key(ip("::ffff:192.0.2.1")), "192.0.2.1");
        assert_eq!(address_key(ip("2001:db8:1:2:3:4:5:6")), "2001:db8:1:2::/64");
    }
}
