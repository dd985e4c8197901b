//! The terminal side: raw mode and the alternate screen (restored on every exit, a panic
//! included), the inbox fed by an input thread and the engine's events ([`inbox`]: input first),
//! and the loop that calls [`App::update`], sends its commands and draws at least every tick
//! while something changed (a busy inbox never starves the frames).

mod inbox;

use std::io::{Stdout, Write, stdout};
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use base64::Engine as _;
use crossterm::event::{
    DisableBracketedPaste, DisableMouseCapture, EnableBracketedPaste, EnableMouseCapture,
    Event as TermEvent, KeyboardEnhancementFlags, PopKeyboardEnhancementFlags,
    PushKeyboardEnhancementFlags,
};
use crossterm::terminal::{
    Clear, ClearType, EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode,
    enable_raw_mode, supports_keyboard_enhancement,
};
use crossterm::{cursor, execute};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGTSTP};
use signal_hook::iterator::Signals;

use self::inbox::{EngineEvents, Inbox};
use crate::app::{App, Msg};
use crate::chats::{SaveJob, saver};
use crate::error::{Error, Result};
use crate::ui::view::View;
use gemma_protocol::Command;
use gemma_protocol::ENGINE_THREAD;
use gemma_protocol::{EngineControl, EngineHandle};

/// How often the screen may be redrawn.
const TICK: Duration = Duration::from_millis(33);

/// When the next tick is: checked after every message, so that a busy inbox (a fast stream of
/// tokens) never delays a frame past its tick.
struct Frames {
    next: Instant,
}

impl Frames {
    fn new(now: Instant) -> Self {
        Self { next: now }
    }

    /// How long the inbox may be waited on.
    fn wait(&self, now: Instant) -> Duration {
        self.next.saturating_duration_since(now)
    }

    /// Whether a tick (and a frame, if anything changed) is due; if so, the next is one
    /// [`TICK`] away.
    fn due(&mut self, now: Instant) -> bool {
        if now < self.next {
            return false;
        }
        self.next = now + TICK;
        true
    }
}

/// Runs the app in the terminal until it quits. `initial` are the commands [`App::new`] returned;
/// `config` is the config file to watch for live reload; chats are saved in `chats`.
pub fn run(
    mut app: App,
    initial: Vec<Command>,
    engine: EngineHandle,
    config: Option<&Path>,
    chats: PathBuf,
) -> Result<Option<i32>> {
    let EngineHandle { control, events } = engine;
    // "Always approve" is saved there (by the saver thread).
    app.config_path = config.map(Path::to_path_buf);
    // Push-to-talk keeps its recordings beside the chats.
    app.recordings_dir = chats.parent().map(|d| d.join("recordings"));
    for c in initial {
        control.send(c);
    }
    let (tx, inbox) = channel::<Inbox>();
    let engine_events = EngineEvents::forward(events, tx.clone());
    // Live reload; without a watch (e.g. no inotify) the app runs on with the config it has.
    let _watch = config.and_then(|path| {
        let tx = tx.clone();
        crate::config::watch::watch(path, move |c| {
            let c = c.map(Box::new).map_err(|e| e.to_string());
            let _ = tx.send(Inbox::App(Msg::Config(c)));
        })
        .ok()
    });
    let save_tx = tx.clone();
    let (saves, saver_thread) = saver(chats, move |e| {
        let _ = save_tx.send(Inbox::App(Msg::Error(e)));
    });
    // SIGTERM, SIGHUP and SIGINT end the app as a quit does (chats and snapshots saved, the
    // terminal restored); SIGTSTP suspends it with the terminal restored.
    let signals = Signals::new([SIGTERM, SIGHUP, SIGINT, SIGTSTP]).map_err(io)?;
    let signal_handle = signals.handle();
    let (sig_tx, sig_rx) = channel::<i32>();
    std::thread::spawn(move || {
        let mut signals = signals;
        for s in signals.forever() {
            if sig_tx.send(s).is_err() {
                break;
            }
        }
    });
    let mut term = Screen::enter()?;
    spawn_input(tx);
    let ports = Ports {
        inbox: &inbox,
        engine: &engine_events,
        signals: &sig_rx,
        control: &control,
        saves: &saves,
    };
    let ended_by = event_loop(&mut app, &mut term, &ports)?;
    drop(term);
    // Every tab is saved on the way out; wait for the writes before the engine goes.
    app.save_all();
    for job in app.take_saves() {
        let _ = saves.send(job);
    }
    drop(saves);
    signal_handle.close();
    let failed = saver_thread.join().unwrap_or_default();
    if let Some(last) = failed.last() {
        // After the screen is restored: the user sees it, and the exit code says so.
        return Err(Error::Save(format!(
            "{} chat save(s) failed, the last: {last}; the chats on disk are the ones saved \
             before",
            failed.len()
        )));
    }
    drop(control);
    Ok(ended_by)
}

/// What the event loop reads from and writes to.
struct Ports<'a> {
    inbox: &'a Receiver<Inbox>,
    engine: &'a EngineEvents,
    signals: &'a Receiver<i32>,
    control: &'a EngineControl,
    saves: &'a Sender<SaveJob>,
}

/// Messages in, commands and saves out, a frame on every tick that changed something, until the
/// app quits; the signal that ended it, if one did.
fn event_loop(app: &mut App, term: &mut Screen, ports: &Ports<'_>) -> Result<Option<i32>> {
    let size = term.terminal.size().map_err(io)?;
    app.update(Msg::Resize(size.width, size.height));
    let mut view = View::default();
    let mut frames = Frames::new(Instant::now());
    loop {
        for sig in ports.signals.try_iter() {
            if sig == SIGTSTP {
                suspend(term, app)?;
            } else {
                app.quit = true;
                return Ok(Some(sig));
            }
        }
        if app.quit {
            return Ok(None);
        }
        match ports.inbox.recv_timeout(frames.wait(Instant::now())) {
            Ok(Inbox::App(Msg::Key(k))) if is_suspend(&k) => suspend(term, app)?,
            Ok(Inbox::App(msg)) => apply(app, msg, ports),
            Ok(Inbox::Engine) => {
                for e in ports.engine.take() {
                    apply(app, Msg::Engine(e), ports);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(None),
        }
        // A frame at least every tick while anything changed, however busy the inbox is.
        if frames.due(Instant::now()) {
            draw_frame(app, term, &mut view)?;
        }
    }
}

/// One message into the app; its commands to the engine, its saves to the saver.
fn apply(app: &mut App, msg: Msg, ports: &Ports<'_>) {
    for c in app.update(msg) {
        ports.control.send(c);
    }
    for job in app.take_saves() {
        let _ = ports.saves.send(job);
    }
}

/// One tick: the app's clock, the clipboard, and the screen when anything changed.
fn draw_frame(app: &mut App, term: &mut Screen, view: &mut View) -> Result<()> {
    app.update(Msg::Tick(Instant::now()));
    if let Some(text) = app.clipboard.take() {
        osc52(&text);
    }
    if app.dirty {
        let mut measured = None;
        term.terminal
            .draw(|f| measured = crate::ui::render(f, app, view))
            .map_err(io)?;
        if let Some(m) = measured {
            app.measured(m);
        }
        app.dirty = false;
    }
    Ok(())
}

fn io(e: std::io::Error) -> Error {
    Error::Io {
        path: "terminal".into(),
        cause: e,
    }
}

/// Reads terminal events on a thread of their own into the inbox.
fn spawn_input(tx: Sender<Inbox>) {
    std::thread::spawn(move || {
        while let Ok(ev) = crossterm::event::read() {
            let msg = match ev {
                TermEvent::Key(k) => Msg::Key(k),
                TermEvent::Paste(p) => Msg::Paste(p),
                TermEvent::Mouse(m) => Msg::Mouse(m),
                TermEvent::Resize(w, h) => Msg::Resize(w, h),
                _ => continue,
            };
            if tx.send(Inbox::App(msg)).is_err() {
                break;
            }
        }
    });
}

/// Ctrl+Z: in raw mode the terminal sends it as a key, not as a signal.
fn is_suspend(k: &crossterm::event::KeyEvent) -> bool {
    use crossterm::event::{KeyCode, KeyEventKind, KeyModifiers};
    k.kind != KeyEventKind::Release
        && k.modifiers.contains(KeyModifiers::CONTROL)
        && matches!(k.code, KeyCode::Char('z') | KeyCode::Char('Z'))
}

/// Suspends the app as a shell job: the terminal restored, the process stopped; on `fg` the
/// screen comes back, redrawn whole.
fn suspend(term: &mut Screen, app: &mut App) -> Result<()> {
    restore();
    let _ = signal_hook::low_level::emulate_default_handler(SIGTSTP);
    // Continued: the screen as it was, drawn whole. (Not `Terminal::clear`: it asks the
    // terminal for the cursor position, and the input thread reads the answer.)
    Screen::setup()?;
    execute!(stdout(), Clear(ClearType::All)).map_err(io)?;
    term.terminal.swap_buffers();
    term.terminal.swap_buffers();
    app.dirty = true;
    Ok(())
}

/// Puts `text` on the clipboard through the terminal (OSC 52), which works over SSH too.
fn osc52(text: &str) {
    let b64 = base64::engine::general_purpose::STANDARD.encode(text);
    let mut out = stdout();
    let _ = write!(out, "\x1b]52;c;{b64}\x07");
    let _ = out.flush();
}

/// The terminal in raw mode on the alternate screen; dropping it (or a panic) restores it.
struct Screen {
    terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl Screen {
    fn enter() -> Result<Self> {
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                // The engine thread's panics are caught there and shown in the UI, which goes
                // on: the terminal stays as it is and nothing is printed over the screen.
                if std::thread::current().name() == Some(ENGINE_THREAD) {
                    return;
                }
                restore();
                previous(info);
            }));
        });
        Self::setup()?;
        let terminal = Terminal::new(CrosstermBackend::new(stdout())).map_err(io)?;
        Ok(Self { terminal })
    }

    /// Raw mode, the alternate screen, paste and mouse reporting (again after a suspend).
    fn setup() -> Result<()> {
        enable_raw_mode().map_err(io)?;
        let mut out = stdout();
        execute!(
            out,
            EnterAlternateScreen,
            EnableBracketedPaste,
            EnableMouseCapture
        )
        .map_err(io)?;
        // Asked once (the answer comes on stdin, which the input thread reads afterwards).
        static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if *SUPPORTED.get_or_init(|| supports_keyboard_enhancement().unwrap_or(false)) {
            // Lets terminals that can tell Shift+Enter from Enter say so.
            let pushed = execute!(
                out,
                PushKeyboardEnhancementFlags(KeyboardEnhancementFlags::DISAMBIGUATE_ESCAPE_CODES)
            );
            ENHANCED.store(pushed.is_ok(), Ordering::SeqCst);
        }
        Ok(())
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// Whether keyboard enhancement was pushed (and must be popped).
static ENHANCED: AtomicBool = AtomicBool::new(false);

/// Leaves raw mode and the alternate screen; safe to call more than once.
fn restore() {
    let mut out = stdout();
    if ENHANCED.swap(false, Ordering::SeqCst) {
        let _ = execute!(out, PopKeyboardEnhancementFlags);
    }
    let _ = execute!(
        out,
        DisableMouseCapture,
        DisableBracketedPaste,
        LeaveAlternateScreen,
        cursor::Show
    );
    let _ = disable_raw_mode();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message every millisecond for a second (the inbox never times out): a tick every
    /// [`TICK`] all the same.
    #[test]
    fn a_busy_inbox_still_gets_a_frame_every_tick() {
        let start = Instant::now();
        let mut frames = Frames::new(start);
        let ticks: Vec<u64> = (0..1000u64)
            .filter(|ms| frames.due(start + Duration::from_millis(*ms)))
            .collect();
        let tick = TICK.as_millis() as u64;
        assert_eq!(ticks.len() as u64, 1000u64.div_ceil(tick), "{ticks:?}");
        assert!(ticks.windows(2).all(|w| w[1] - w[0] == tick), "{ticks:?}");
        let next = ticks.last().expect("ticks") + tick;
        let wait = frames.wait(start + Duration::from_millis(999));
        assert_eq!(wait, Duration::from_millis(next - 999));
    }
}
