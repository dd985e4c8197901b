//! `gemma-chat serve`: the warm engine behind the OpenAI chat completions API, a front end like
//! the TUI that sees only the engine protocol. Other tools (editors, scripts, agents, and
//! gemma-chat's own remote engine on another machine) reuse the loaded model and its warm
//! conversations. This file owns the options and the start; [`http`] the routes, [`request`]
//! what a request may say, [`convo`] its messages as exchanges, [`calls`] the client's tools
//! and the calls the model made, [`input`] what a request becomes for the engine, [`slots`] the
//! conversations kept warm, [`turn`] one answer's events, [`wire`] the API's JSON, [`media`] the
//! pictures and recordings written for the engine and [`pump`] the engine's events routed to the
//! turns that wait for them.

mod calls;
mod convo;
mod error;
mod http;
mod input;
mod media;
mod parts;
mod pump;
mod request;
mod slots;
mod turn;
mod wire;

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;

use gemma_protocol::{EngineHandle, TabSettings};

pub use self::error::ServeError;

/// What the server is, resolved by the binary from the config and the flags.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The address to listen on (loopback unless told otherwise).
    pub host: String,
    /// The port (0: any free one; [`Bound::addr`] says which).
    pub port: u16,
    /// Conversations kept, one engine tab each (the engine moves idle ones to host memory when
    /// its device budget is spent).
    pub slots: usize,
    /// Answers that run at once, interleaved step by step by the engine (at most `slots`).
    pub parallel: usize,
    /// Requests that may wait for a slot; past them a request is answered 503 with Retry-After.
    pub queue: usize,
    /// The key clients must send (`Authorization: Bearer …`); required off loopback.
    pub api_key: Option<String>,
    /// The largest request body, in bytes (pictures and recordings travel inside it).
    pub max_body: usize,
    /// The most pictures and recordings one request may carry.
    pub max_media: usize,
    /// The model's name, as `/v1/models` and every answer report it.
    pub model: String,
    /// The engine's context limit per conversation, in tokens.
    pub context_length: usize,
    /// Whether the model has a thinking mode (`reasoning_effort`).
    pub can_think: bool,
    /// Whether the model writes tool calls (`tools`).
    pub can_call_tools: bool,
    /// Thought budgets for `reasoning_effort` low, medium and high.
    pub budgets: [usize; 3],
    /// Every request's settings before its own fields: the config's, resolved as a new tab's.
    pub base: TabSettings,
    /// Where pictures and recordings sent in requests are written (by their hash) for the
    /// engine to read.
    pub media_dir: PathBuf,
    /// Fetches http(s) picture URLs (`None`: only data: URLs are taken).
    pub fetch: Option<Fetcher>,
}

/// What a fetch of a picture's URL gives: its bytes, or why not (said to the client).
pub type Fetched =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<u8>, String>> + Send>>;

/// Fetches an http(s) URL, bounded and guarded as the binary decides (`[serve] fetch_images`).
#[derive(Clone)]
pub struct Fetcher(pub Arc<dyn Fn(String) -> Fetched + Send + Sync>);

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fetcher")
    }
}

/// A server whose socket is bound, not yet serving.
#[derive(Debug)]
pub struct Bound {
    listener: TcpListener,
    options: ServeOptions,
}

/// Binds the socket. Refuses an address off loopback without an API key: a model reachable from
/// the network is everyone's to use.
pub fn bind(options: ServeOptions) -> Result<Bound, ServeError> {
    let ip: IpAddr = options
        .host
        .parse()
        .map_err(|_| ServeError::Host(options.host.clone()))?;
    if !ip.is_loopback() && options.api_key.is_none() {
        return Err(ServeError::NeedsKey(options.host.clone()));
    }
    if options.slots == 0 {
        return Err(ServeError::NoSlots);
    }
    let addr = SocketAddr::new(ip, options.port);
    let listener = TcpListener::bind(addr).map_err(|e| ServeError::Bind(addr, e))?;
    std::fs::create_dir_all(&options.media_dir)
        .map_err(|e| ServeError::MediaDir(options.media_dir.clone(), e))?;
    Ok(Bound { listener, options })
}

impl Bound {
    /// The address clients reach.
    pub fn addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], self.options.port)))
    }

    /// Serves `engine` (ready: its `Ready` event already read) until the process ends.
    pub fn run(self, engine: EngineHandle) -> Result<(), ServeError> {
        self.run_until(engine, std::future::pending())
    }

    /// Serves `engine` on a thread of its own until the returned [`Running`] is dropped; then
    /// the engine shuts down and its model is freed (what a test that serves wants).
    pub fn spawn(self, engine: EngineHandle) -> Running {
        let addr = self.addr();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let _ = self.run_until(engine, async {
                let _ = rx.await;
            });
        });
        Running {
            addr,
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    fn run_until(
        self,
        engine: EngineHandle,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ServeError::Runtime)?;
        runtime.block_on(http::serve(self.listener, self.options, engine, stop))
    }
}

/// A server running on its own thread ([`Bound::spawn`]); dropping it stops the server (the
/// answers in progress finish first) and shuts its engine down.
#[derive(Debug)]
pub struct Running {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// The address clients reach.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
