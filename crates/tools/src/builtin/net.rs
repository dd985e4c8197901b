//! The built-in tools' HTTP: a GET that follows at most [`MAX_REDIRECTS`] redirects, checking
//! every hop, reads at most a given number of bytes, and, unless private addresses are allowed,
//! refuses a host that is or resolves to a loopback, private, link-local, shared or unspecified
//! address. Names are checked in the resolver itself ([`Guard`]), so the address checked is the
//! address connected to; literal addresses are checked before each request ([`check_url`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{CONTENT_TYPE, LOCATION};
use url::{Host, Url};

/// Most redirects followed for one fetch.
pub const MAX_REDIRECTS: usize = 5;

/// A failed fetch, in a sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetError {
    /// Not an http(s) URL.
    #[error("`{0}` is not an http:// or https:// URL")]
    BadUrl(String),
    /// The host is on this machine or a private network.
    #[error("{0} is a loopback, private or link-local address; fetching it is not allowed")]
    Private(String),
    /// More than [`MAX_REDIRECTS`] redirects, or one without a usable `Location`.
    #[error("{0}")]
    Redirect(String),
    /// The server answered with an error status.
    #[error("the server answered {0}")]
    Status(String),
    /// No connection, a time-out, a broken body.
    #[error("{0}")]
    Transport(String),
}

/// A fetched body, at most the bytes asked for.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// Where it came from, after redirects.
    pub url: Url,
    /// Its `Content-Type`, lower-cased (empty when absent).
    pub content_type: String,
    /// The bytes read.
    pub body: Vec<u8>,
    /// There was more than that.
    pub truncated: bool,
}

/// Whether `ip` is an address of the public internet: not loopback, private, link-local,
/// shared (CGNAT), unspecified, broadcast, multicast or documentation, and for IPv6 not
/// unique-local, site-local, nor a mapped or compatible IPv4 address that is not public.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public_v4(v4);
            }
            let s = v6.segments();
            let compatible = s[..6].iter().all(|&x| x == 0);
            if compatible && !v6.is_loopback() && !v6.is_unspecified() {
                return is_public_v4(Ipv4Addr::from(((s[6] as u32) << 16) | s[7] as u32));
            }
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                || (s[0] & 0xffc0) == 0xfec0
                || (s[0] == 0x2001 && s[1] == 0x0db8)
                || s[0] == 0x0064 && s[1] == 0xff9b && is_translated_private(v6))
        }
    }
}

/// NAT64 (`64:ff9b::/96`) of a non-public IPv4 address.
fn is_translated_private(v6: Ipv6Addr) -> bool {
    let s = v6.segments();
    !is_public_v4(Ipv4Addr::from(((s[6] as u32) << 16) | s[7] as u32))
}

/// [`is_public`] for IPv4.
fn is_public_v4(v4: Ipv4Addr) -> bool {
    let [a, b, ..] = v4.octets();
    !(v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || v4.is_multicast()
        || v4.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && v4.octets()[2] == 0)
        || (a == 198 && (18..20).contains(&b))
        || a >= 240)
}

/// A resolver that fails for a name with any non-public address.
struct Guard;

impl Resolve for Guard {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
                let why = NetError::Private(format!("{host} ({})", bad.ip()));
                return Err(why.to_string().into());
            }
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// A client for the built-ins: no automatic redirects, no proxy, `timeout` for a whole
/// request, and the [`Guard`] resolver unless `allow_private`.
pub fn client(allow_private: bool, timeout: Duration) -> Result<reqwest::Client, NetError> {
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(15)))
        .user_agent(concat!("gemma-chat/", env!("CARGO_PKG_VERSION")));
    if !allow_private {
        builder = builder.dns_resolver(Arc::new(Guard));
    }
    builder
        .build()
        .map_err(|e| NetError::Transport(format!("the HTTP client cannot be built: {e}")))
}

/// `raw` as an http(s) URL, refused when its host is a literal non-public address and
/// `allow_private` is off.
pub fn check_url(raw: &str, allow_private: bool) -> Result<Url, NetError> {
    let url = Url::parse(raw.trim()).map_err(|_| NetError::BadUrl(shown(raw)))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(NetError::BadUrl(shown(raw)));
    }
    if !allow_private {
        let literal = match url.host() {
            Some(Host::Ipv4(v4)) => Some(IpAddr::V4(v4)),
            Some(Host::Ipv6(v6)) => Some(IpAddr::V6(v6)),
            _ => None,
        };
        if let Some(ip) = literal.filter(|ip| !is_public(*ip)) {
            return Err(NetError::Private(ip.to_string()));
        }
        if url
            .host_str()
            .is_some_and(|h| h.eq_ignore_ascii_case("localhost"))
        {
            return Err(NetError::Private("localhost".to_owned()));
        }
    }
    Ok(url)
}

/// `raw` clipped for a message.
fn shown(raw: &str) -> String {
    crate::host::clean::message(raw, 200)
}

/// GETs `url`, following redirects (each hop checked), and reads at most `max_bytes`.
pub async fn get(
    client: &reqwest::Client,
    url: Url,
    allow_private: bool,
    max_bytes: usize,
    accept: &str,
) -> Result<Fetched, NetError> {
    let mut url = url;
    for hop in 0..=MAX_REDIRECTS {
        let response = client
            .get(url.clone())
            .header(reqwest::header::ACCEPT, accept)
            .send()
            .await
            .map_err(|e| NetError::Transport(describe(&e)))?;
        let status = response.status();
        if status.is_redirection() {
            if hop == MAX_REDIRECTS {
                return Err(NetError::Redirect(format!(
                    "more than {MAX_REDIRECTS} redirects"
                )));
            }
            let location = response
                .headers()
                .get(LOCATION)
                .and_then(|v| v.to_str().ok());
            let next = location.and_then(|l| url.join(l).ok()).ok_or_else(|| {
                NetError::Redirect(format!("a {status} redirect without a usable Location"))
            })?;
            url = check_url(next.as_str(), allow_private)?;
            continue;
        }
        if !status.is_success() {
            return Err(NetError::Status(status.to_string()));
        }
        return read_body(response, url, max_bytes).await;
    }
    Err(NetError::Redirect(format!(
        "more than {MAX_REDIRECTS} redirects"
    )))
}

/// Reads at most `max_bytes` of `response`'s body.
async fn read_body(
    mut response: reqwest::Response,
    url: Url,
    max_bytes: usize,
) -> Result<Fetched, NetError> {
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let mut body = Vec::new();
    let mut truncated = false;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| NetError::Transport(describe(&e)))?
    {
        let room = max_bytes - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            truncated = true;
            break;
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Fetched {
        url,
        content_type,
        body,
        truncated,
    })
}

/// A reqwest error with its causes, in one line (the guard's refusal is among them).
fn describe(error: &reqwest::Error) -> String {
    let mut text = if error.is_timeout() {
        "timed out".to_owned()
    } else {
        error.to_string()
    };
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
        source = cause_of(source);
    }
    crate::host::clean::message(&text, 400)
}

/// The next cause in a chain.
fn cause_of<'a>(
    error: Option<&'a (dyn std::error::Error + 'static)>,
) -> Option<&'a (dyn std::error::Error + 'static)> {
    error.and_then(std::error::Error::source)
}
