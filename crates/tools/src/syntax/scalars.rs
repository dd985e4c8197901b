//! The states of the two open-ended values a call writes: a string (UTF-8 progress and how much
//! of a literal `<|"|>` its last bytes spell, [`Text`]) and a number (JSON's grammar with bounded
//! lengths, [`NumSt`]).

/// Inside a string: UTF-8 progress and how much of a literal `<|"|>` the last bytes spell.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Text {
    /// 0: at a character boundary; 1..=7: a multi-byte character is open (see `RANGE`).
    pub utf8: u8,
    /// Bytes of `<|"|>` matched so far (0..=4).
    pub q: u8,
}

/// The byte range the next continuation byte must fall in, per open UTF-8 state.
pub(crate) const RANGE: [(u8, u8); 8] = [
    (0, 0),
    (0x80, 0xBF),
    (0xA0, 0xBF),
    (0x80, 0x9F),
    (0x80, 0xBF),
    (0x90, 0xBF),
    (0x80, 0x8F),
    (0x80, 0xBF),
];
/// The state after a continuation byte.
const NEXT: [u8; 8] = [0, 0, 1, 1, 1, 4, 4, 4];
const LITERAL: &[u8; 5] = b"<|\"|>";

impl Text {
    pub const OPEN: Text = Text { utf8: 0, q: 0 };
    /// How many distinct states [`Text::index`] tells apart.
    pub const STATES: usize = 12;

    pub fn clean(self) -> bool {
        self.utf8 == 0
    }

    /// The state after byte `b`, if the string may hold it here.
    pub fn push(self, b: u8) -> Option<Text> {
        if self.utf8 != 0 {
            let (lo, hi) = RANGE[self.utf8 as usize];
            return (lo..=hi).contains(&b).then(|| Text {
                utf8: NEXT[self.utf8 as usize],
                q: 0,
            });
        }
        let q = if b == LITERAL[self.q as usize] {
            if self.q == 4 {
                return None;
            }
            self.q + 1
        } else {
            u8::from(b == b'<')
        };
        let utf8 = match b {
            0x00..=0x7F => 0,
            0xC2..=0xDF => 1,
            0xE0 => 2,
            0xED => 3,
            0xE1..=0xEF => 4,
            0xF0 => 5,
            0xF4 => 6,
            0xF1..=0xF3 => 7,
            _ => return None,
        };
        Some(Text { utf8, q })
    }

    /// A dense index (`0..STATES`): `q > 0` only happens at a character boundary.
    pub fn index(self) -> usize {
        if self.q > 0 {
            7 + self.q as usize
        } else {
            self.utf8 as usize
        }
    }

    /// The state of a dense [`Text::index`].
    pub fn from_index(i: usize) -> Text {
        if i >= 8 {
            Text {
                utf8: 0,
                q: (i - 7) as u8,
            }
        } else {
            Text {
                utf8: i as u8,
                q: 0,
            }
        }
    }
}

/// A number being written (JSON's grammar, bounded lengths: at most two exponent digits, so
/// that every number fits an f64).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum NumSt {
    Minus,
    Zero,
    Int(u8),
    Dot,
    Frac(u8),
    E,
    ESign,
    Exp(u8),
}

impl NumSt {
    pub fn start(b: u8) -> Option<Self> {
        match b {
            b'-' => Some(Self::Minus),
            b'0' => Some(Self::Zero),
            b'1'..=b'9' => Some(Self::Int(1)),
            _ => None,
        }
    }

    pub fn next(self, integer: bool, b: u8) -> Option<Self> {
        let digit = b.is_ascii_digit();
        let real = !integer;
        match self {
            Self::Minus if b == b'0' => Some(Self::Zero),
            Self::Minus if digit => Some(Self::Int(1)),
            Self::Int(n) if digit && n < 19 => Some(Self::Int(n + 1)),
            Self::Zero | Self::Int(_) if real && b == b'.' => Some(Self::Dot),
            Self::Zero | Self::Int(_) | Self::Frac(_) if real && matches!(b, b'e' | b'E') => {
                Some(Self::E)
            }
            Self::Dot if digit => Some(Self::Frac(1)),
            Self::Frac(n) if digit && n < 20 => Some(Self::Frac(n + 1)),
            Self::E if matches!(b, b'+' | b'-') => Some(Self::ESign),
            Self::E | Self::ESign if digit => Some(Self::Exp(1)),
            Self::Exp(n) if digit && n < 2 => Some(Self::Exp(n + 1)),
            _ => None,
        }
    }

    pub fn accepting(self) -> bool {
        matches!(
            self,
            Self::Zero | Self::Int(_) | Self::Frac(_) | Self::Exp(_)
        )
    }
}
