//! The egress proxy (decisions §18): how a docker sandbox with an `allowlist` reaches the host
//! names it may, which an address firewall cannot tell apart. Its containers get
//! `HTTP_PROXY`/`HTTPS_PROXY` (and the lowercase forms) pointing here, on their network's
//! gateway address, and their firewall lets them reach this port. A request is admitted by the
//! host name it names (`CONNECT host:port` for TLS, the absolute URL for plain HTTP), checked
//! against the allowlist of the sandbox it comes from, told apart by its source address. A
//! refusal is an immediate `403`. The same port serves the transparent mode: the container's
//! firewall redirects its TCP to ports 80 and 443 here, and a connection that starts with a
//! TLS handshake is admitted by the name in its SNI (then connected to that name on 443, the
//! handshake passed on untouched), one that starts with an origin-form request by its `Host`
//! header; a refused TLS connection is closed. Sandboxes are found by address from the `dev.svc.egress`
//! label their containers carry, so a restarted svc still knows them.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use svc_core::egress::Egress;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::ProviderError;

/// Label carrying a container's egress, as JSON.
pub(super) const LABEL_EGRESS: &str = "dev.svc.egress";
/// The longest request head read.
const MAX_HEAD: usize = 16 * 1024;
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Finds the egress of the container at an address the registry does not know yet.
pub(super) type Lookup =
    Arc<dyn Fn(IpAddr) -> futures::future::BoxFuture<'static, Option<Egress>> + Send + Sync>;

/// The listeners (one per gateway address) and the sandboxes they serve.
pub(super) struct EgressProxy {
    port: u16,
    /// `providers.docker.egress_allow_host`.
    allow_host: bool,
    sandboxes: Arc<Mutex<HashMap<IpAddr, Egress>>>,
    /// Which address each registered container has, to forget it on removal.
    addresses: Mutex<HashMap<String, IpAddr>>,
    listeners: tokio::sync::Mutex<HashMap<IpAddr, JoinHandle<()>>>,
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        for (_, listener) in self.listeners.get_mut().drain() {
            listener.abort();
        }
    }
}

impl EgressProxy {
    pub(super) fn new(port: u16, allow_host: bool) -> Self {
        EgressProxy {
            port,
            allow_host,
            sandboxes: Arc::default(),
            addresses: Mutex::default(),
            listeners: tokio::sync::Mutex::default(),
        }
    }

    pub(super) fn port(&self) -> u16 {
        self.port
    }

    /// Listens on `gateway` unless it already does.
    pub(super) async fn ensure_listening(
        &self,
        gateway: IpAddr,
        lookup: Lookup,
    ) -> Result<(), ProviderError> {
        let mut listeners = self.listeners.lock().await;
        if listeners.get(&gateway).is_some_and(|l| !l.is_finished()) {
            return Ok(());
        }
        let address = SocketAddr::new(gateway, self.port);
        let listener = TcpListener::bind(address).await.map_err(|e| {
            ProviderError::caused(format!("the egress proxy cannot listen on {address} (providers.docker.egress_proxy_port)"), e)
        })?;
        let sandboxes = Arc::clone(&self.sandboxes);
        let allow_host = self.allow_host;
        listeners.insert(
            gateway,
            tokio::spawn(async move {
                while let Ok((stream, peer)) = listener.accept().await {
                    let (sandboxes, lookup) = (Arc::clone(&sandboxes), Arc::clone(&lookup));
                    tokio::spawn(async move {
                        let egress = known(&sandboxes, peer.ip(), &lookup).await;
                        if let Err(err) = serve(stream, egress, allow_host).await {
                            tracing::debug!(peer = %peer, error = %err, "egress proxy connection ended");
                        }
                    });
                }
            }),
        );
        Ok(())
    }

    /// Container `name` at `address` may reach what `egress` allows.
    pub(super) fn register(&self, name: &str, address: IpAddr, egress: Egress) {
        self.addresses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), address);
        self.sandboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(address, egress);
    }

    /// Container `name` is gone (its address may be handed to another).
    pub(super) fn forget(&self, name: &str) {
        let address = self
            .addresses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
        if let Some(address) = address {
            self.sandboxes
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&address);
        }
    }
}

async fn known(
    sandboxes: &Mutex<HashMap<IpAddr, Egress>>,
    address: IpAddr,
    lookup: &Lookup,
) -> Option<Egress> {
    let cached = sandboxes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&address)
        .cloned();
    if cached.is_some() {
        return cached;
    }
    let found = lookup(address).await?;
    sandboxes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(address, found.clone());
    Some(found)
}

async fn answer(stream: &mut TcpStream, status: &str, message: &str) -> std::io::Result<()> {
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{message}",
        message.len()
    );
    stream.write_all(response.as_bytes()).await
}

/// The request head and whatever followed it in the same reads.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<(Vec<u8>, usize)> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok((buffer, end + 4));
        }
        if buffer.len() > MAX_HEAD {
            return Err(std::io::Error::other("request head too long"));
        }
        let read = tokio::time::timeout(IO_TIMEOUT, stream.read(&mut chunk))
            .await
            .map_err(|_| std::io::Error::other("no request head in time"))??;
        if read == 0 {
            return Err(std::io::Error::other("closed before a request head"));
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

/// `host:port` (or `[v6]:port`), with `default` when no port is named.
fn host_port(authority: &str, default: u16) -> Option<(String, u16)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None => default,
        };
        return Some((host.to_owned(), port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host.to_owned(), port.parse().ok()?)),
        None => Some((authority.to_owned(), default)),
    }
}

/// The server name of a TLS ClientHello record (RFC 8446 §4.1.2, RFC 6066 §3), if complete
/// in `record`.
fn server_name(record: &[u8]) -> Option<String> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (bytes.get(..n)?, bytes.get(n..)?);
        *bytes = rest;
        Some(head)
    }
    fn length(bytes: &mut &[u8], width: usize) -> Option<usize> {
        Some(
            take(bytes, width)?
                .iter()
                .fold(0usize, |n, b| (n << 8) | usize::from(*b)),
        )
    }
    let mut bytes = record;
    if take(&mut bytes, 1)? != [0x16] {
        return None;
    }
    take(&mut bytes, 2)?;
    let record_len = length(&mut bytes, 2)?;
    let mut hello = take(&mut bytes, record_len)?;
    if take(&mut hello, 1)? != [0x01] {
        return None;
    }
    let hello_len = length(&mut hello, 3)?;
    let mut body = take(&mut hello, hello_len)?;
    take(&mut body, 2 + 32)?;
    let session = length(&mut body, 1)?;
    take(&mut body, session)?;
    let suites = length(&mut body, 2)?;
    take(&mut body, suites)?;
    let compression = length(&mut body, 1)?;
    take(&mut body, compression)?;
    let extensions_len = length(&mut body, 2)?;
    let mut extensions = take(&mut body, extensions_len)?;
    while !extensions.is_empty() {
        let kind = length(&mut extensions, 2)?;
        let len = length(&mut extensions, 2)?;
        let mut data = take(&mut extensions, len)?;
        if kind != 0 {
            continue;
        }
        let list_len = length(&mut data, 2)?;
        let mut list = take(&mut data, list_len)?;
        while !list.is_empty() {
            let name_type = take(&mut list, 1)?[0];
            let name_len = length(&mut list, 2)?;
            let name = take(&mut list, name_len)?;
            if name_type == 0 {
                return String::from_utf8(name.to_vec()).ok();
            }
        }
    }
    None
}

/// A redirected TLS connection: admitted by its SNI, connected to that name on 443.
async fn serve_tls(
    mut client: TcpStream,
    egress: &Egress,
    allow_host: bool,
) -> std::io::Result<()> {
    let mut record = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    let name = loop {
        if record.len() >= 5 {
            let needed = 5 + ((usize::from(record[3]) << 8) | usize::from(record[4]));
            if record.len() >= needed {
                break server_name(&record[..needed]);
            }
        }
        if record.len() > MAX_HEAD {
            break None;
        }
        let read = tokio::time::timeout(IO_TIMEOUT, client.read(&mut chunk))
            .await
            .map_err(|_| std::io::Error::other("no TLS handshake in time"))??;
        if read == 0 {
            return Ok(());
        }
        record.extend_from_slice(&chunk[..read]);
    };
    let Some(name) = name.filter(|name| egress.admits(name, 443)) else {
        // Nothing to answer in TLS's own terms; closing fails the handshake at once.
        return Ok(());
    };
    let mut upstream = tokio::time::timeout(IO_TIMEOUT, connect_checked(&name, 443, allow_host))
        .await
        .map_err(|_| std::io::Error::other("no answer in time"))??;
    upstream.write_all(&record).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// Connects to the first address of `host:port` a sandbox may reach. The name is resolved here
/// and every address checked, so a name that resolves to the host's own addresses, now or after
/// the spawn's check, is refused (no DNS rebinding; decisions §30).
async fn connect_checked(host: &str, port: u16, allow_host: bool) -> std::io::Result<TcpStream> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let mut refused = false;
    let mut last = None;
    for address in tokio::net::lookup_host((host, port)).await? {
        if !allow_host && svc_core::egress::is_host_only(address.ip()) {
            refused = true;
            continue;
        }
        match TcpStream::connect(address).await {
            Ok(stream) => return Ok(stream),
            Err(err) => last = Some(err),
        }
    }
    Err(last.unwrap_or_else(|| {
        if refused {
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "it resolves to the host's own addresses (loopback, link-local or unspecified)",
            )
        } else {
            std::io::Error::new(std::io::ErrorKind::NotFound, "the name has no address")
        }
    }))
}

async fn serve(
    mut client: TcpStream,
    egress: Option<Egress>,
    allow_host: bool,
) -> std::io::Result<()> {
    let Some(egress) = egress else {
        return answer(
            &mut client,
            "403 Forbidden",
            "not a sandbox with an egress allowlist\n",
        )
        .await;
    };
    let mut first = [0u8; 1];
    let peeked = tokio::time::timeout(IO_TIMEOUT, client.peek(&mut first))
        .await
        .map_err(|_| std::io::Error::other("nothing sent in time"))??;
    if peeked == 1 && first[0] == 0x16 {
        return serve_tls(client, &egress, allow_host).await;
    }
    let (head, end) = read_head(&mut client).await?;
    let text = String::from_utf8_lossy(&head[..end]).into_owned();
    let (request_line, rest_of_head) = text.split_once("\r\n").unwrap_or((&text, ""));
    let mut parts = request_line.split(' ');
    let (method, target, version) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or("HTTP/1.1"),
    );
    let connect = method.eq_ignore_ascii_case("CONNECT");
    // Origin form (`GET /path`): a redirected plain HTTP request, named by its Host header.
    let transparent = target.starts_with('/');
    let parsed = if connect {
        host_port(target, 443).map(|(host, port)| (host, port, String::new()))
    } else if transparent {
        rest_of_head
            .split("\r\n")
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.trim()
                    .eq_ignore_ascii_case("host")
                    .then(|| value.trim())
            })
            .and_then(|host| host_port(host, 80))
            .map(|(host, port)| (host, port, target.to_owned()))
    } else {
        target.strip_prefix("http://").and_then(|rest| {
            let (authority, path) = match rest.find('/') {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, "/"),
            };
            host_port(authority, 80).map(|(host, port)| (host, port, path.to_owned()))
        })
    };
    let Some((host, port, path)) = parsed else {
        return answer(
            &mut client,
            "400 Bad Request",
            "send CONNECT host:port, an absolute http:// URL, or a Host header\n",
        )
        .await;
    };
    if !egress.admits(&host, port) {
        return answer(
            &mut client,
            "403 Forbidden",
            &format!("egress to {host}:{port} is not allowed\n"),
        )
        .await;
    }
    let upstream = tokio::time::timeout(IO_TIMEOUT, connect_checked(&host, port, allow_host)).await;
    let mut upstream = match upstream {
        Ok(Ok(stream)) => stream,
        Ok(Err(err)) if err.kind() == std::io::ErrorKind::PermissionDenied => {
            return answer(
                &mut client,
                "403 Forbidden",
                &format!("egress to {host}:{port} is not allowed: {err}\n"),
            )
            .await;
        }
        Ok(Err(err)) => {
            return answer(
                &mut client,
                "502 Bad Gateway",
                &format!("{host}:{port}: {err}\n"),
            )
            .await;
        }
        Err(_) => {
            return answer(
                &mut client,
                "504 Gateway Timeout",
                &format!("{host}:{port} did not answer\n"),
            )
            .await
        }
    };
    if connect {
        client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await?;
    } else if transparent {
        upstream.write_all(&head[..end]).await?;
    } else {
        upstream
            .write_all(format!("{method} {path} {version}\r\n{rest_of_head}").as_bytes())
            .await?;
    }
    upstream.write_all(&head[end..]).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The proxy checks the address it connects to, after its own resolution: a name that
    /// resolves to loopback is refused even with a listener there, unless the host is allowed.
    #[tokio::test]
    async fn names_resolving_to_the_host_are_refused_after_resolution() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        for host in ["localhost", "127.0.0.1", "[::ffff:127.0.0.1]"] {
            let refused = connect_checked(host, port, false).await.unwrap_err();
            assert_eq!(
                refused.kind(),
                std::io::ErrorKind::PermissionDenied,
                "{host}: {refused}"
            );
        }
        connect_checked("127.0.0.1", port, true).await.unwrap();
    }

    #[test]
    fn authorities_split_into_host_and_port() {
        assert_eq!(
            host_port("example.com:8443", 443),
            Some(("example.com".into(), 8443))
        );
        assert_eq!(
            host_port("example.com", 80),
            Some(("example.com".into(), 80))
        );
        assert_eq!(host_port("[::1]:8080", 80), Some(("::1".into(), 8080)));
        assert_eq!(host_port("[::1]", 443), Some(("::1".into(), 443)));
        assert_eq!(host_port("x:notaport", 80), None);
    }

    /// A ClientHello as a client sends it, with extensions before and after the SNI.
    fn client_hello(name: &str) -> Vec<u8> {
        let be16 = |n: usize| u16::try_from(n).unwrap_or(u16::MAX).to_be_bytes();
        let mut sni = Vec::new();
        sni.extend_from_slice(&be16(name.len() + 3));
        sni.push(0);
        sni.extend_from_slice(&be16(name.len()));
        sni.extend_from_slice(name.as_bytes());
        let mut extensions = vec![0x00, 0x0b, 0x00, 0x02, 0x01, 0x00];
        extensions.extend_from_slice(&[0x00, 0x00]);
        extensions.extend_from_slice(&be16(sni.len()));
        extensions.extend_from_slice(&sni);
        extensions.extend_from_slice(&[0x00, 0x17, 0x00, 0x00]);
        let mut body = vec![0x03, 0x03];
        body.extend_from_slice(&[7u8; 32]);
        body.push(32);
        body.extend_from_slice(&[9u8; 32]);
        body.extend_from_slice(&[0x00, 0x04, 0x13, 0x01, 0x13, 0x02, 0x01, 0x00]);
        body.extend_from_slice(&be16(extensions.len()));
        body.extend_from_slice(&extensions);
        let mut handshake = vec![0x01, 0x00];
        handshake.extend_from_slice(&be16(body.len()));
        handshake.extend_from_slice(&body);
        let mut record = vec![0x16, 0x03, 0x01];
        record.extend_from_slice(&be16(handshake.len()));
        record.extend_from_slice(&handshake);
        record
    }

    #[test]
    fn the_server_name_is_read_from_a_client_hello() {
        let hello = client_hello("files.pypi.org");
        assert_eq!(server_name(&hello).as_deref(), Some("files.pypi.org"));
        assert_eq!(server_name(&hello[..hello.len() - 10]), None, "incomplete");
        assert_eq!(server_name(b"GET / HTTP/1.1\r\n"), None);
    }
}
