//! Rendering an untrusted chat template where it cannot hurt the app: in a helper process (a fork
//! of this one, made while it is still small) with an address-space limit, a wall-clock limit per
//! render, no core file and no terminal signals. minijinja's fuel counts instructions, not the
//! size of values, so a template that doubles a string in a loop grows without bound in a few
//! steps; in the helper that ends in a failed allocation, the helper dies, and the render is
//! refused with a message that says why. The helper renders requests sent over a pipe, leaves
//! with `_exit` when the pipe closes, and runs no destructor, flush or panic hook of the app.
//! Elsewhere than Unix the render runs in-process (fuel and output limits only).

use std::time::Duration;

use super::TemplateError;

/// Address space the helper may take beyond what the process mapped when it was made.
pub const MEMORY: usize = 1 << 30;
/// Wall-clock time one render may take (fuel stops a busy loop well before this).
pub const TIME: Duration = Duration::from_secs(10);

/// What renders a request in the helper: the request's bytes in, the text or the error out.
pub type Render<'a> = &'a dyn Fn(&[u8]) -> Result<String, TemplateError>;

/// Asked while a render runs: true stops it (the user cancelled the turn, closed the tab, quit).
#[derive(Clone)]
pub struct Interrupt(pub std::sync::Arc<dyn Fn() -> bool + Send + Sync>);

impl std::fmt::Debug for Interrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Interrupt")
    }
}

/// One template's helper process, made on first use (or by [`Sandbox::start`]) and again after
/// one died; and what stops a render it runs.
#[derive(Debug, Default)]
pub struct Sandbox {
    #[cfg(unix)]
    helper: std::sync::Mutex<Option<unix::Helper>>,
    interrupt: std::sync::Mutex<Option<Interrupt>>,
}

impl Sandbox {
    /// Makes the helper now, while the process is small (forking later copies the page tables
    /// of all the memory the app has written by then).
    pub fn start(&self, render: Render) {
        #[cfg(unix)]
        {
            let mut helper = self.helper.lock().unwrap_or_else(|p| p.into_inner());
            if helper.is_none() {
                *helper = unix::Helper::spawn(render).ok();
            }
        }
        #[cfg(not(unix))]
        let _ = render;
    }

    /// What stops a render from now on (`None`: nothing but the time limit).
    pub fn set_interrupt(&self, interrupt: Option<Interrupt>) {
        *self.interrupt.lock().unwrap_or_else(|p| p.into_inner()) = interrupt;
    }

    /// Whether the render running now should stop.
    pub fn interrupted(&self) -> bool {
        let i = self
            .interrupt
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        i.is_some_and(|i| (i.0)())
    }

    /// Renders `request` with `render` in the helper; `origin` names the template in errors.
    pub fn run(
        &self,
        origin: &str,
        request: &[u8],
        render: Render,
    ) -> Result<String, TemplateError> {
        #[cfg(unix)]
        {
            let mut helper = self.helper.lock().unwrap_or_else(|p| p.into_inner());
            let stop = || self.interrupted();
            unix::run(&mut helper, request, render, &stop).map_err(|mut e| {
                e.origin = origin.to_string();
                e
            })
        }
        #[cfg(not(unix))]
        {
            let _ = origin;
            render(request)
        }
    }
}

#[cfg(unix)]
#[allow(unsafe_code)] // fork, pipes, rlimits, signals: libc calls, each with its reason beside it.
mod unix {
    use std::fs::File;
    use std::io::{Read, Write};
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::time::Instant;

    use super::{MEMORY, Render, TIME, TemplateError};

    /// An answer starts with one of these (anything else is the runtime's last words).
    const OK: u8 = 0xA5;
    const ERR: u8 = 0x5A;
    /// The largest request or answer (the render's output is bounded below this).
    const MAX_MESSAGE: u64 = 256 << 20;

    /// A running helper: its pid and the two ends of its pipes.
    #[derive(Debug)]
    pub(super) struct Helper {
        pid: libc::pid_t,
        to: File,
        from: File,
    }

    impl Drop for Helper {
        fn drop(&mut self) {
            // SAFETY: `pid` is our child and not yet reaped.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            reap(self.pid);
        }
    }

    fn pipe() -> std::io::Result<(File, File)> {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a valid array of two descriptors for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just opened and are owned by nothing else.
        Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
    }

    impl Helper {
        pub(super) fn spawn(render: Render) -> std::io::Result<Self> {
            let (req_read, req_write) = pipe()?;
            let (ans_read, ans_write) = pipe()?;
            let limit = address_space().map_or(libc::RLIM_INFINITY, |a| {
                a.saturating_add(MEMORY as u64) as libc::rlim_t
            });
            // SAFETY: the child runs only the renders (which allocate: glibc's fork leaves
            // malloc usable in the child) and plain system calls, then `_exit`s.
            let pid = unsafe { libc::fork() };
            if pid < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if pid == 0 {
                drop((req_write, ans_read));
                serve(req_read, ans_write, limit, render)
            }
            Ok(Self {
                pid,
                to: req_write,
                from: ans_read,
            })
        }
    }

    /// The helper's life: limits and signals set, stdout and stderr into the answer pipe (the
    /// runtime's abort message is why a render died), then requests until the pipe closes.
    fn serve(mut from: File, mut to: File, limit: libc::rlim_t, render: Render) -> ! {
        let out = to.as_raw_fd();
        let keep = [from.as_raw_fd(), out];
        // SAFETY (whole block): plain system calls on this process's own descriptors, limits
        // and signal dispositions.
        unsafe {
            libc::dup2(out, 1);
            libc::dup2(out, 2);
            for fd in 3..1024 {
                if !keep.contains(&fd) {
                    libc::close(fd);
                }
            }
            // Its own process group: Ctrl+C, Ctrl+Z and a hang-up are for the app, not for it.
            libc::setpgid(0, 0);
            for signal in [libc::SIGINT, libc::SIGQUIT, libc::SIGTSTP, libc::SIGHUP] {
                libc::signal(signal, libc::SIG_IGN);
            }
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            let cap = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            libc::setrlimit(libc::RLIMIT_AS, &cap);
        }
        std::panic::set_hook(Box::new(|_| {}));
        while let Ok(request) = read_message(&mut from) {
            let result =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| render(&request)));
            let mut answer = Vec::new();
            match result {
                Ok(Ok(text)) => {
                    answer.push(OK);
                    answer.extend_from_slice(text.as_bytes());
                }
                Ok(Err(e)) => {
                    answer.push(ERR);
                    answer.extend_from_slice(&e.line.map_or(u64::MAX, |l| l as u64).to_le_bytes());
                    answer.push(u8::from(e.limit));
                    answer.extend_from_slice(e.what.as_bytes());
                }
                Err(_) => answer.extend_from_slice(b"panicked"),
            }
            let mut framed = (answer.len() as u64).to_le_bytes().to_vec();
            framed.extend_from_slice(&answer);
            if to.write_all(&framed).is_err() {
                break;
            }
        }
        // SAFETY: leaves the helper without running anything of the app's.
        unsafe { libc::_exit(0) }
    }

    fn read_message(from: &mut File) -> std::io::Result<Vec<u8>> {
        let mut len = [0u8; 8];
        from.read_exact(&mut len)?;
        let len = u64::from_le_bytes(len);
        if len > MAX_MESSAGE {
            return Err(std::io::Error::other("message too long"));
        }
        let mut bytes = vec![0; len as usize];
        from.read_exact(&mut bytes)?;
        Ok(bytes)
    }

    /// One render in the helper (made again if there is none or it has gone).
    pub(super) fn run(
        slot: &mut Option<Helper>,
        request: &[u8],
        render: Render,
        stop: &dyn Fn() -> bool,
    ) -> Result<String, TemplateError> {
        let fault = |what: String| TemplateError {
            origin: String::new(),
            what,
            line: None,
            limit: true,
        };
        let mut framed = (request.len() as u64).to_le_bytes().to_vec();
        framed.extend_from_slice(request);
        // A helper that has gone since its last render (killed from outside) is made again.
        for attempt in 0..2 {
            if slot.is_none() {
                *slot = Some(
                    Helper::spawn(render)
                        .map_err(|e| fault(format!("could not be isolated: {e}")))?,
                );
            }
            let Some(helper) = slot.as_mut() else {
                unreachable!("made above")
            };
            if helper.to.write_all(&framed).is_err() && attempt == 0 {
                *slot = None;
                continue;
            }
            let (bytes, end) = collect(&mut helper.from, stop);
            if let Some(answer) = bytes
                .get(8..)
                .filter(|a| end == End::Done && answered(&bytes, a))
            {
                return decode(answer);
            }
            // Stopped, dead or out of time during this render: the helper goes with it.
            *slot = None;
            if end == End::Stopped {
                return Err(TemplateError {
                    limit: false,
                    ..fault("was stopped before it finished: the turn was cancelled".into())
                });
            }
            return Err(fault(death(&bytes, end == End::TimedOut)));
        }
        Err(fault(
            "could not be isolated: its helper keeps dying".into(),
        ))
    }

    /// Whether `bytes` hold one whole framed answer.
    fn answered(bytes: &[u8], answer: &[u8]) -> bool {
        let len = u64::from_le_bytes(bytes[..8].try_into().unwrap_or([0xff; 8]));
        len == answer.len() as u64 && matches!(answer.first(), Some(&OK) | Some(&ERR))
    }

    /// How a wait for the helper's answer ended.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum End {
        /// An answer, or the helper's end.
        Done,
        /// The time limit.
        TimedOut,
        /// `stop` said so.
        Stopped,
    }

    /// How often `stop` is asked while a render runs.
    const STOP_POLL: std::time::Duration = std::time::Duration::from_millis(50);

    /// The helper's bytes until a whole answer, its end, the time limit, or `stop`.
    fn collect(from: &mut File, stop: &dyn Fn() -> bool) -> (Vec<u8>, End) {
        let deadline = Instant::now() + TIME;
        let mut bytes = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            // A whole answer ends the wait; anything else (the runtime's last words) is read
            // until the helper is gone.
            if bytes.len() >= 8 {
                let len = u64::from_le_bytes(bytes[..8].try_into().unwrap_or([0xff; 8]));
                if len <= MAX_MESSAGE && bytes.len() as u64 >= 8 + len {
                    return (bytes, End::Done);
                }
                if len > MAX_MESSAGE && bytes.len() > 1 << 16 {
                    return (bytes, End::Done);
                }
            }
            if stop() {
                return (bytes, End::Stopped);
            }
            let left = deadline
                .saturating_duration_since(Instant::now())
                .min(STOP_POLL);
            if left.is_zero() {
                return (bytes, End::TimedOut);
            }
            let mut poll = libc::pollfd {
                fd: from.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(&mut poll, 1, ms) };
            if ready <= 0 {
                continue;
            }
            match from.read(&mut buf) {
                Ok(0) => return (bytes, End::Done),
                Ok(n) => bytes.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return (bytes, End::Done),
            }
        }
    }

    /// A whole answer decoded.
    fn decode(answer: &[u8]) -> Result<String, TemplateError> {
        match answer.split_first() {
            Some((&OK, text)) => String::from_utf8(text.to_vec()).map_err(|_| TemplateError {
                origin: String::new(),
                what: "wrote invalid UTF-8".into(),
                line: None,
                limit: false,
            }),
            Some((&ERR, rest)) if rest.len() >= 9 => {
                let (line, rest) = rest.split_at(8);
                let line = u64::from_le_bytes(line.try_into().unwrap_or([0xff; 8]));
                Err(TemplateError {
                    origin: String::new(),
                    what: String::from_utf8_lossy(&rest[1..]).into_owned(),
                    line: (line != u64::MAX).then_some(line as usize),
                    limit: rest[0] != 0,
                })
            }
            _ => Err(TemplateError {
                origin: String::new(),
                what: "answered nonsense".into(),
                line: None,
                limit: true,
            }),
        }
    }

    /// Why a helper died during a render, from its last words.
    fn death(bytes: &[u8], timed_out: bool) -> String {
        let said = String::from_utf8_lossy(bytes);
        if timed_out {
            format!("ran longer than {} s and was stopped", TIME.as_secs())
        } else if said.contains("memory allocation") {
            format!(
                "needed more than {} MiB of memory and was stopped",
                MEMORY >> 20
            )
        } else if said.contains("overflowed its stack") {
            "nested too deeply and was stopped".to_string()
        } else {
            "stopped its renderer".to_string()
        }
    }

    /// Waits for `pid` to end.
    fn reap(pid: libc::pid_t) {
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
            && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
        {}
    }

    /// This process's address space in bytes (`/proc/self/statm`); `None` where unknown (the
    /// helper then runs without a memory limit).
    fn address_space() -> Option<u64> {
        let pages = std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok());
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
        pages.map(|p| p.saturating_mul(page))
    }
}
