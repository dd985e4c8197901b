//! Search across 1,000 chats (`cargo bench --bench search`): 1,000 generated tabs of 20
//! messages each (about 6 MB of text), searched for a rare word, a common word and a miss; the
//! median of 21 runs each, against the UI's frame budget (33 ms).

use std::time::Instant;

use gemma_app::app::search::{MAX_HITS, search};
use gemma_app::app::tab::{Message, Role, Tab};

fn main() {
    let words = [
        "lighthouse",
        "borrow",
        "kernel",
        "river",
        "matrix",
        "token",
        "garden",
        "compiler",
        "planet",
        "window",
        "cache",
        "sentence",
        "mountain",
        "thread",
        "signal",
        "harbor",
    ];
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut tabs = Vec::with_capacity(1000);
    let mut bytes = 0;
    for id in 0..1000u64 {
        let mut t = Tab::new(id, format!("chat {id}"), Default::default());
        for m in 0..20 {
            let text: Vec<&str> = (0..45)
                .map(|_| words[(next() % words.len() as u64) as usize])
                .collect();
            let mut text = text.join(" ");
            if id == 777 && m == 13 {
                text.push_str(" zanzibar");
            }
            bytes += text.len();
            let role = if m % 2 == 0 { Role::User } else { Role::Model };
            t.push(Message::new(role, text));
        }
        tabs.push(t);
    }
    println!(
        "search: 1,000 chats, 20,000 messages, {:.1} MB of text",
        bytes as f64 / 1e6
    );
    for (what, query) in [
        ("rare word (1 hit)", "Zanzibar"),
        ("common word (capped hits)", "harbor"),
        ("no match", "xylophone"),
    ] {
        let mut times = Vec::new();
        let mut found = 0;
        for _ in 0..21 {
            let start = Instant::now();
            found = search(&tabs, query, MAX_HITS).len();
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "{what:<26} {found:>4} hits  median {:.2} ms  (max {:.2} ms; frame budget 33 ms)",
            times[10], times[20]
        );
    }
}
