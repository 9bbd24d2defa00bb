//! A TCP proxy on loopback between a part and a real server (a database or a broker), through
//! which a test breaks the link on purpose, without touching the server the other tests share.
//!
//! On a test's command it cuts every connection and refuses new ones ([`cut`](FaultProxy::cut),
//! until [`mend`](FaultProxy::mend)); refuses new connections only
//! ([`refuse`](FaultProxy::refuse)); holds every byte both ways ([`stall`](FaultProxy::stall),
//! until [`release`](FaultProxy::release)); delays each reply ([`delay`](FaultProxy::delay));
//! and cuts the one connection that sends a given frame, such as a `COMMIT`
//! ([`trap`](FaultProxy::trap)), either after the server answered it (the commit landed, the
//! client never hears so) or before the server saw it (the commit never happened): to the client
//! both look the same, an ambiguous commit.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

/// A `COMMIT` as sqlx sends it to PostgreSQL: a simple query (`Q`, its length, the text).
pub const POSTGRES_COMMIT: &[u8] = b"Q\0\0\0\x0bCOMMIT\0";
/// A `COMMIT` as sqlx sends it to MySQL and MariaDB: a `COM_QUERY` packet (length 7,
/// sequence 0, command 3, the text).
pub const MYSQL_COMMIT: &[u8] = b"\x07\0\0\0\x03COMMIT";

/// How long a trapped connection waits for the server's answer before it gives up on it.
const ANSWER_PATIENCE: Duration = Duration::from_secs(10);

/// What the server did with the frame a [`trap`](FaultProxy::trap) caught.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ambiguity {
    /// The frame reached the server and the server answered; the answer was thrown away and the
    /// connection cut. For a `COMMIT`: it committed, and the client cannot know.
    Landed,
    /// The connection was cut before the frame reached the server. For a `COMMIT`: the
    /// server rolls back, and the client cannot know either.
    Lost,
}

/// A trap set by [`FaultProxy::trap`]: resolves once a connection sent its frame and was cut.
#[derive(Debug)]
pub struct Sprung(oneshot::Receiver<()>);

impl Sprung {
    /// Waits until the trap caught its frame (and, for [`Ambiguity::Landed`], the server
    /// answered it); panics after `within`.
    pub async fn wait(self, within: Duration) {
        tokio::time::timeout(within, self.0)
            .await
            .unwrap_or_else(|_| panic!("no connection sent the trapped frame in {within:?}"))
            .expect("the proxy outlives its traps");
    }

    /// `true` once the trap caught its frame.
    pub fn is_sprung(&mut self) -> bool {
        !matches!(self.0.try_recv(), Err(oneshot::error::TryRecvError::Empty))
    }
}

#[derive(Debug)]
struct Trap {
    // What the connection must have sent before, if anything: the trap springs on that
    // connection's next `frame` only.
    after: Option<Vec<u8>>,
    frame: Vec<u8>,
    ambiguity: Ambiguity,
    sprung: oneshot::Sender<()>,
}

/// What every connection of the proxy consults before it forwards a chunk.
#[derive(Debug)]
struct Faults {
    refusing: AtomicBool,
    refused: AtomicU64,
    accepted: AtomicU64,
    // Connections forwarding now.
    open: AtomicU64,
    delay_micros: AtomicU64,
    trap: Mutex<Option<Trap>>,
    // `true` while stalled.
    stalled: watch::Sender<bool>,
    // Bumped on every cut, so that the connections open then end.
    generation: watch::Sender<u64>,
}

impl Faults {
    /// The trap, taken, if `window` holds its frame (and the connection sent what it must send
    /// first: `primed`, which this sets when `window` holds that).
    fn spring(&self, window: &[u8], primed: &mut bool) -> Option<Trap> {
        let mut trap = self.trap.lock().unwrap();
        let set = trap.as_ref()?;
        let holds = |frame: &[u8]| window.windows(frame.len()).any(|part| part == frame);
        if let Some(after) = &set.after
            && !*primed
        {
            *primed = holds(after);
            return None;
        }
        if holds(&set.frame) { trap.take() } else { None }
    }

    fn longest_frame(&self) -> usize {
        self.trap.lock().unwrap().as_ref().map_or(0, |trap| {
            trap.frame
                .len()
                .max(trap.after.as_ref().map_or(0, Vec::len))
        })
    }

    fn delay(&self) -> Duration {
        Duration::from_micros(self.delay_micros.load(Ordering::SeqCst))
    }
}

/// A proxy from a port of its own on 127.0.0.1 to `upstream`.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    faults: Arc<Faults>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` (`host:port`).
    pub async fn to(upstream: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("the proxy's address");
        let faults = Arc::new(Faults {
            refusing: AtomicBool::new(false),
            refused: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            open: AtomicU64::new(0),
            delay_micros: AtomicU64::new(0),
            trap: Mutex::new(None),
            stalled: watch::channel(false).0,
            generation: watch::channel(0).0,
        });
        let upstream = upstream.to_owned();
        let task = tokio::spawn({
            let faults = faults.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    if faults.refusing.load(Ordering::SeqCst) {
                        faults.refused.fetch_add(1, Ordering::SeqCst);
                        drop(client);
                        continue;
                    }
                    faults.accepted.fetch_add(1, Ordering::SeqCst);
                    let (faults, upstream) = (faults.clone(), upstream.clone());
                    tokio::spawn(async move {
                        let _open = Open::count(&faults);
                        let mut ended = faults.generation.subscribe();
                        let Ok(server) = TcpStream::connect(&upstream).await else {
                            return;
                        };
                        tokio::select! {
                            () = forward(client, server, &faults) => {}
                            _ = ended.changed() => {}
                        }
                    });
                }
            }
        });
        Self { addr, faults, task }
    }

    /// A proxy to the server of `url` (`scheme://user@host:port/…`), and the same URL through
    /// the proxy. A database URL gets TLS turned off, so that a [`trap`](Self::trap) can read
    /// the frames.
    pub async fn for_url(url: &str) -> (Self, String) {
        let authority = authority(url);
        let proxy = Self::to(authority).await;
        let mut through = url.replacen(authority, &proxy.addr.to_string(), 1);
        let plain = if url.starts_with("postgres") {
            Some("sslmode=disable")
        } else if url.starts_with("mysql") || url.starts_with("mariadb") {
            Some("ssl-mode=disabled")
        } else {
            None
        };
        if let Some(plain) = plain {
            through.push(if through.contains('?') { '&' } else { '?' });
            through.push_str(plain);
        }
        (proxy, through)
    }

    /// The proxy's `host:port`, to put in a URL in place of the server's.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Drops every open connection and refuses new ones until [`mend`](Self::mend).
    pub fn cut(&self) {
        self.refuse();
        self.faults.generation.send_modify(|g| *g += 1);
    }

    /// Refuses new connections (accepts and closes them at once, as a server that went away
    /// mid-handshake would look) until [`mend`](Self::mend); open ones go on.
    pub fn refuse(&self) {
        self.faults.refusing.store(true, Ordering::SeqCst);
    }

    /// Accepts and forwards again.
    pub fn mend(&self) {
        self.faults.refusing.store(false, Ordering::SeqCst);
    }

    /// Holds every byte, both ways, on every connection (new ones too) until
    /// [`release`](Self::release): to the client the server has hung, to the server the client.
    pub fn stall(&self) {
        self.faults.stalled.send_replace(true);
    }

    /// Lets the stalled bytes go on, in order.
    pub fn release(&self) {
        self.faults.stalled.send_replace(false);
    }

    /// Delays each chunk of the server's answers by `delay` (zero: none): a server far away.
    pub fn delay(&self, delay: Duration) {
        let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.faults.delay_micros.store(micros, Ordering::SeqCst);
    }

    /// Cuts the next connection whose client sends `frame` (such as [`POSTGRES_COMMIT`]) as
    /// `ambiguity` says; the others go on. One trap at a time: a new one replaces the old.
    pub fn trap(&self, frame: &[u8], ambiguity: Ambiguity) -> Sprung {
        self.set_trap(None, frame, ambiguity)
    }

    /// [`trap`](Self::trap) for the `frame` a connection sends after it sent `after` (in the
    /// same chunk or a later one): the `COMMIT` of a transaction that ran a given statement.
    pub fn trap_after(&self, after: &[u8], frame: &[u8], ambiguity: Ambiguity) -> Sprung {
        self.set_trap(Some(after), frame, ambiguity)
    }

    fn set_trap(&self, after: Option<&[u8]>, frame: &[u8], ambiguity: Ambiguity) -> Sprung {
        let (sprung, caught) = oneshot::channel();
        *self.faults.trap.lock().unwrap() = Some(Trap {
            after: after.map(<[u8]>::to_vec),
            frame: frame.to_vec(),
            ambiguity,
            sprung,
        });
        Sprung(caught)
    }

    /// Connections refused while cut or refusing: proof that the client tried, and so was cut
    /// off.
    pub fn refused(&self) -> u64 {
        self.faults.refused.load(Ordering::SeqCst)
    }

    /// Waits until no connection forwards any more (after a [`cut`](Self::cut), the cut ones
    /// have let go of their sockets, so that nothing more reaches either side through them), for
    /// `within` at most.
    pub async fn until_closed(&self, within: Duration) {
        let started = std::time::Instant::now();
        while self.faults.open.load(Ordering::SeqCst) > 0 {
            assert!(
                started.elapsed() < within,
                "the proxy's connections did not close within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Connections accepted and forwarded so far.
    pub fn accepted(&self) -> u64 {
        self.faults.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.faults.generation.send_modify(|g| *g += 1);
    }
}

/// One connection forwarding, counted while it lives.
struct Open(Arc<Faults>);

impl Open {
    fn count(faults: &Arc<Faults>) -> Self {
        faults.open.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(faults))
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `host:port` of `url`.
fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    rest.split(['/', '?']).next().unwrap_or(rest)
}

/// Forwards between `client` and `server` until either closes, honouring the stall, the
/// delay and the trap.
async fn forward(client: TcpStream, server: TcpStream, faults: &Faults) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let mut stalled = faults.stalled.subscribe();
    let (mut up, mut down) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    // The end of the last chunk up, so that a frame split between two reads is still seen.
    let mut tail: Vec<u8> = Vec::new();
    // Set once a trapped frame went up: the server's next answer is thrown away.
    let mut landed: Option<oneshot::Sender<()>> = None;
    // Set once this connection sent what the trap waits for first.
    let mut primed = false;
    loop {
        tokio::select! {
            read = client_read.read(&mut up), if landed.is_none() => {
                let Ok(n @ 1..) = read else { return };
                let _ = stalled.wait_for(|stalled| !stalled).await;
                let mut window = std::mem::take(&mut tail);
                window.extend_from_slice(&up[..n]);
                if let Some(trap) = faults.spring(&window, &mut primed) {
                    match trap.ambiguity {
                        Ambiguity::Lost => {
                            let _ = trap.sprung.send(());
                            return;
                        }
                        Ambiguity::Landed => landed = Some(trap.sprung),
                    }
                }
                if server_write.write_all(&up[..n]).await.is_err() {
                    return;
                }
                let keep = faults.longest_frame().saturating_sub(1).min(window.len());
                tail = window.split_off(window.len() - keep);
            }
            read = server_read.read(&mut down) => {
                let Ok(n @ 1..) = read else { return };
                if let Some(sprung) = landed.take() {
                    let _ = sprung.send(());
                    return;
                }
                let _ = stalled.wait_for(|stalled| !stalled).await;
                let delay = faults.delay();
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                if client_write.write_all(&down[..n]).await.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep(ANSWER_PATIENCE), if landed.is_some() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::authority;

    #[test]
    fn the_authority_is_what_sits_between_the_user_and_the_path() {
        assert_eq!(
            authority("postgres://postgres@127.0.0.1:5432/test"),
            "127.0.0.1:5432"
        );
        assert_eq!(
            authority("amqp://guest:guest@127.0.0.1:5672/%2f"),
            "127.0.0.1:5672"
        );
        assert_eq!(authority("nats://127.0.0.1:4222"), "127.0.0.1:4222");
        assert_eq!(authority("127.0.0.1:9092"), "127.0.0.1:9092");
        assert_eq!(
            authority("mysql://root@127.0.0.1:3306/test?ssl-mode=disabled"),
            "127.0.0.1:3306"
        );
    }
}
