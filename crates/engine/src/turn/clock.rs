//! A turn's clock ([`TurnClock`]): when it started, when its prefill ended, its first answer
//! token and its end, and the time it waited for tools (and the user's approval), which is no
//! decoding time. All in seconds since the turn started.

use std::time::Instant;

/// When a turn's stages happened.
#[derive(Debug, Clone)]
pub(crate) struct TurnClock {
    started: Instant,
    prefill_s: Option<f64>,
    ttft_s: f64,
    finished_s: Option<f64>,
    /// Seconds spent waiting for tools, and since when the current wait runs.
    waited_s: f64,
    paused_at: Option<f64>,
}

/// What the clock says of a turn so far.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Times {
    /// Seconds the prefill took (all so far, while it runs).
    pub prefill_s: f64,
    /// Seconds of decoding since the prefill, waits for tools left out.
    pub decode_s: f64,
    /// Seconds to the first answer token (0 before it).
    pub ttft_s: f64,
}

impl TurnClock {
    /// A clock started now.
    pub fn start() -> Self {
        Self {
            started: Instant::now(),
            prefill_s: None,
            ttft_s: 0.0,
            finished_s: None,
            waited_s: 0.0,
            paused_at: None,
        }
    }

    fn now(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// The prompt is prefilled.
    pub fn prefilled(&mut self) {
        self.prefill_s = Some(self.now());
    }

    /// The first answer token was chosen.
    pub fn first_token(&mut self) {
        self.ttft_s = self.now();
    }

    /// The turn waits for tools.
    pub fn pause(&mut self) {
        self.paused_at = Some(self.now());
    }

    /// The tools answered: the wait is counted.
    pub fn resume(&mut self) {
        if let Some(at) = self.paused_at.take() {
            self.waited_s += self.now() - at;
        }
    }

    /// The turn ended.
    pub fn finish(&mut self) {
        self.finished_s = Some(self.now());
    }

    /// The stages' times so far (at the end, once ended).
    pub fn times(&self) -> Times {
        let now = self.finished_s.unwrap_or_else(|| self.now());
        let prefill_s = self.prefill_s.unwrap_or(now);
        let waited = self.waited_s + self.paused_at.map_or(0.0, |at| now - at);
        Times {
            prefill_s,
            decode_s: now - prefill_s - waited,
            ttft_s: self.ttft_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_tools_are_no_decoding_time() {
        let mut c = TurnClock::start();
        c.prefilled();
        c.first_token();
        c.pause();
        std::thread::sleep(std::time::Duration::from_millis(30));
        c.resume();
        c.finish();
        let t = c.times();
        assert!(t.decode_s < 0.025, "{t:?}");
        assert!(t.ttft_s >= t.prefill_s);
        let ended = c.times();
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(c.times(), ended, "an ended clock stands still");
    }
}
