//! transformers' `strftime_now`: the current time (UTC) in C `strftime` codes, without a time
//! zone database.

use std::fmt::Write as _;

/// transformers' `strftime_now(format)`: the current time (UTC here) in `strftime`'s codes.
pub(super) fn strftime_now(format: &str) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    strftime(format, secs)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// `strftime` of the UTC time `secs` after the epoch, for the common codes.
pub(super) fn strftime(format: &str, secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let weekday = (days + 3).rem_euclid(7) as usize;
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let before = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334][month as usize - 1];
    let yday = before + day + i64::from(leap && month > 2);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let _ = match chars.next() {
            Some('Y') => write!(out, "{year}"),
            Some('y') => write!(out, "{:02}", year % 100),
            Some('m') => write!(out, "{month:02}"),
            Some('d') => write!(out, "{day:02}"),
            Some('-') if chars.clone().next() == Some('d') => {
                chars.next();
                write!(out, "{day}")
            }
            Some('B') => write!(out, "{}", MONTHS[month as usize - 1]),
            Some('b') => write!(out, "{}", &MONTHS[month as usize - 1][..3]),
            Some('A') => write!(out, "{}", DAYS[weekday]),
            Some('a') => write!(out, "{}", &DAYS[weekday][..3]),
            Some('j') => write!(out, "{yday:03}"),
            Some('H') => write!(out, "{h:02}"),
            Some('I') => write!(out, "{:02}", (h + 11) % 12 + 1),
            Some('p') => write!(out, "{}", if h < 12 { "AM" } else { "PM" }),
            Some('M') => write!(out, "{m:02}"),
            Some('S') => write!(out, "{s:02}"),
            Some('%') => write!(out, "%"),
            Some(other) => write!(out, "%{other}"),
            None => write!(out, "%"),
        };
    }
    out
}
