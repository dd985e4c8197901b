//! HTML reduced to readable text for `fetch_url`, without an HTML parser: the `<title>` first,
//! comments and the contents of `script`, `style`, `noscript`, `template`, `svg`, `iframe` (and
//! the title, already given) dropped, block elements as line breaks, list items as `- `, the common character
//! references decoded, and white space collapsed. Linear in the input.

/// Elements whose whole content is dropped.
const SKIPPED: &[&str] = &[
    "script", "style", "noscript", "template", "svg", "title", "iframe",
];
/// Elements that start or end a line.
const BLOCKS: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "br",
    "dd",
    "div",
    "dl",
    "dt",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "main",
    "nav",
    "ol",
    "p",
    "pre",
    "section",
    "table",
    "tr",
    "ul",
    "body",
    "html",
];

/// Whether `body` (after `content_type`) looks like HTML.
pub fn is_html(content_type: &str, body: &str) -> bool {
    if content_type.contains("html") {
        return true;
    }
    let start = body
        .trim_start()
        .get(..15)
        .unwrap_or_default()
        .to_ascii_lowercase();
    start.starts_with("<!doctype html") || start.starts_with("<html")
}

/// The readable text of `html`.
pub fn to_text(html: &str) -> String {
    let mut raw = String::with_capacity(html.len() / 2);
    if let Some(title) = title(html).filter(|t| !t.is_empty()) {
        raw.push_str(&title);
        raw.push_str("\n\n");
    }
    let mut rest = html;
    while let Some(at) = rest.find('<') {
        raw.push_str(&decode(&rest[..at]));
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix("<!--") {
            rest = after.find("-->").map_or("", |end| &after[end + 3..]);
            continue;
        }
        let Some((name, closing, len)) = tag(rest) else {
            raw.push('<');
            rest = &rest[1..];
            continue;
        };
        rest = &rest[len..];
        if !closing && SKIPPED.contains(&name.as_str()) {
            rest = skip_to_close(rest, &name);
        } else if name == "li" && !closing {
            raw.push_str("\n- ");
        } else if BLOCKS.contains(&name.as_str()) {
            raw.push('\n');
        } else if matches!(name.as_str(), "td" | "th") {
            raw.push(' ');
        }
    }
    raw.push_str(&decode(rest));
    collapse(&raw)
}

/// The `<title>` of `html`, decoded and on one line.
fn title(html: &str) -> Option<String> {
    let lower = html.get(..html.len().min(64 * 1024))?.to_ascii_lowercase();
    let open = lower.find("<title")?;
    let start = open + lower[open..].find('>')? + 1;
    let end = start + lower[start..].find("</title")?;
    let text = decode(html.get(start..end)?);
    Some(text.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// A tag at the start of `s` (which starts with `<`): its lower-cased name, whether it closes,
/// and its length up to and including `>`. `None` when `<` does not start a tag.
fn tag(s: &str) -> Option<(String, bool, usize)> {
    let body = &s[1..];
    let (closing, body) = match body.strip_prefix('/') {
        Some(b) => (true, b),
        None => (false, body),
    };
    let name_len = body
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(body.len());
    let bang = body.starts_with('!') || body.starts_with('?');
    if name_len == 0 && !bang {
        return None;
    }
    let name = body[..name_len].to_ascii_lowercase();
    let mut quote: Option<char> = None;
    for (i, c) in s.char_indices().skip(1) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '>') => return Some((name, closing, i + 1)),
            _ => {}
        }
    }
    Some((name, closing, s.len()))
}

/// What follows the `</name>` that closes a skipped element (all of `s` if none does).
fn skip_to_close<'a>(s: &'a str, name: &str) -> &'a str {
    let closer = format!("</{name}");
    let mut from = 0;
    while let Some(at) = find_ascii_ci(&s[from..], &closer) {
        let start = from + at;
        let after = &s[start + closer.len()..];
        if !after.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            return after.find('>').map_or("", |end| &after[end + 1..]);
        }
        from = start + closer.len();
    }
    ""
}

/// The byte index of `needle` (ASCII) in `hay`, ignoring ASCII case.
fn find_ascii_ci(hay: &str, needle: &str) -> Option<usize> {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    if n.len() > h.len() {
        return None;
    }
    (0..=h.len() - n.len()).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

/// `text` with its character references decoded (unknown ones kept as written).
pub fn decode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let end = rest[1..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '#'))
            .map(|e| e + 1);
        let decoded = end
            .filter(|&e| e > 1 && rest[e..].starts_with(';'))
            .and_then(|e| reference(&rest[1..e]).map(|c| (c, e + 1)));
        match decoded {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The character a reference names (`amp`, `#39`, `#x27`, …).
fn reference(name: &str) -> Option<char> {
    if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse().ok()?,
        };
        return char::from_u32(code).filter(|c| !c.is_control() || c.is_whitespace());
    }
    Some(match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => ' ',
        "mdash" => '—',
        "ndash" => '–',
        "hellip" => '…',
        "copy" => '©',
        "reg" => '®',
        "trade" => '™',
        "lsquo" => '‘',
        "rsquo" => '’',
        "ldquo" => '“',
        "rdquo" => '”',
        "laquo" => '«',
        "raquo" => '»',
        "middot" => '·',
        "bull" => '•',
        "euro" => '€',
        _ => return None,
    })
}

/// Runs of spaces and tabs as one space, lines trimmed, at most one blank line in a row.
fn collapse(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut blank = 0;
    for line in raw.lines() {
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if line.is_empty() {
            blank += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank > 0 { "\n\n" } else { "\n" });
        }
        blank = 0;
        out.push_str(&line);
    }
    out
}
