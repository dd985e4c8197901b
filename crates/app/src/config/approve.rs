//! "Always approve this tool", saved in the user's config file: the tool's name added to
//! `[mcp.servers.SERVER] auto_approve` (or `[tools] auto_approve` for the built-ins), the rest of
//! the file left as it was written, comments and order included. The text is edited in one place
//! (the list's value replaced, or one line added under the table's header, or a `[tools]` table
//! appended), then read back: the edit is written only when the file means exactly what it meant
//! before plus the one name, and still makes a valid configuration.

use std::path::Path;

use toml::de::{DeTable, DeValue};
use toml::{Spanned, Table, Value};

use super::tools::BUILTIN;
use super::{CONFIG_LIMIT, Config};
use crate::error::{Error, Result};

/// Adds `tool` (the server's own name for it) to the `auto_approve` list of `server` (`builtin`
/// for the built-in tools) in the config file at `path`, creating the file for a built-in when
/// there is none. Returns whether the file changed (false: the tool was already listed). A
/// symlinked file is edited where it points.
pub fn save_auto_approve(path: &Path, server: &str, tool: &str) -> Result<bool> {
    let Some((target, new)) = plan_auto_approve(path, server, tool)? else {
        return Ok(false);
    };
    let cannot = |why: String| cannot_save(&target, server, tool, &why);
    if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| cannot(e.to_string()))?;
    }
    gemma_files::write_atomic(&target, new.as_bytes()).map_err(|e| cannot(e.to_string()))?;
    Ok(true)
}

/// What [`save_auto_approve`] would write, and where (`None`: the tool is listed already),
/// without writing it; why not, when the file cannot be edited safely. What the app checks
/// before it says the approval is saved.
pub fn plan_auto_approve(
    path: &Path,
    server: &str,
    tool: &str,
) -> Result<Option<(std::path::PathBuf, String)>> {
    let target = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let old = if std::fs::symlink_metadata(&target).is_ok() {
        let bytes =
            gemma_files::read_limited(&target, CONFIG_LIMIT).map_err(|e| Error::io(&target, e))?;
        String::from_utf8(bytes)
            .map_err(|_| Error::Settings(format!("{} is not UTF-8 text", target.display())))?
    } else {
        String::new()
    };
    let Some(new) = add_auto_approve(&old, server, tool)
        .map_err(|why| cannot_save(&target, server, tool, &why))?
    else {
        return Ok(None);
    };
    Config::from_layers(Some((target.as_path(), new.as_str())))?;
    Ok(Some((target, new)))
}

/// The refusal to save "always approve `tool`" in `target`, with what to do instead.
fn cannot_save(target: &Path, server: &str, tool: &str, why: &str) -> Error {
    Error::Save(format!(
        "cannot save \"always approve {tool}\" in {}: {why}; add \"{tool}\" to {} \
         auto_approve by hand",
        target.display(),
        table_name(server)
    ))
}

/// `[mcp.servers.SERVER]`, or `[tools]` for the built-ins.
fn table_name(server: &str) -> String {
    if server == BUILTIN {
        "[tools]".into()
    } else {
        format!("[mcp.servers.{server}]")
    }
}

/// The keys of the table whose `auto_approve` lists `server`'s approved tools.
fn table_path(server: &str) -> Vec<&str> {
    if server == BUILTIN {
        vec!["tools"]
    } else {
        vec!["mcp", "servers", server]
    }
}

/// `text` with `tool` added to `server`'s `auto_approve`; `None` when it is listed already; why
/// not, when the file cannot be edited safely.
pub fn add_auto_approve(
    text: &str,
    server: &str,
    tool: &str,
) -> std::result::Result<Option<String>, String> {
    let keys = table_path(server);
    let doc = DeTable::parse(text)
        .map_err(|e| format!("the file does not parse ({})", e.message().trim()))?;
    let new = match lookup(doc.get_ref(), &keys) {
        Some(DeValue::Table(table)) => match entry(table, "auto_approve") {
            Some(list) => {
                let DeValue::Array(items) = list.get_ref() else {
                    return Err("its `auto_approve` is not a list".into());
                };
                let mut names: Vec<String> = Vec::new();
                for item in items.iter() {
                    match item.get_ref() {
                        DeValue::String(s) => names.push(s.to_string()),
                        _ => return Err("its `auto_approve` holds a non-string".into()),
                    }
                }
                if names.iter().any(|n| n == tool) {
                    return Ok(None);
                }
                names.push(tool.to_owned());
                let span = list.span();
                let rendered = Value::Array(names.into_iter().map(Value::String).collect());
                format!("{}{rendered}{}", &text[..span.start], &text[span.end..])
            }
            None => {
                let at = header_end(text, doc.get_ref(), &keys).ok_or_else(|| {
                    format!("{} is not written as a table header", table_name(server))
                })?;
                let line = format!("auto_approve = {}\n", list_of(tool));
                let sep = if at > 0 && !text[..at].ends_with('\n') {
                    "\n"
                } else {
                    ""
                };
                format!("{}{sep}{line}{}", &text[..at], &text[at..])
            }
        },
        Some(_) => return Err(format!("{} is not a table", table_name(server))),
        None if server == BUILTIN => {
            let sep = match text {
                "" => "",
                t if t.ends_with('\n') => "\n",
                _ => "\n\n",
            };
            format!("{text}{sep}[tools]\nauto_approve = {}\n", list_of(tool))
        }
        None => return Err(format!("the file has no {}", table_name(server))),
    };
    verify(text, &new, &keys, tool)?;
    Ok(Some(new))
}

/// `["tool"]`, escaped as TOML.
fn list_of(tool: &str) -> Value {
    Value::Array(vec![Value::String(tool.to_owned())])
}

/// The value at `keys` in `table`.
fn lookup<'a, 'i>(table: &'a DeTable<'i>, keys: &[&str]) -> Option<&'a DeValue<'i>> {
    let (first, rest) = keys.split_first()?;
    let value = entry(table, first)?.get_ref();
    match (rest.is_empty(), value) {
        (true, v) => Some(v),
        (false, DeValue::Table(t)) => lookup(t, rest),
        (false, _) => None,
    }
}

/// The value of `key` in `table`.
fn entry<'a, 'i>(table: &'a DeTable<'i>, key: &str) -> Option<&'a Spanned<DeValue<'i>>> {
    table
        .iter()
        .find(|(k, _)| k.get_ref() == key)
        .map(|(_, v)| v)
}

/// The byte offset just after the header line `[KEYS]` (which may quote or space its keys, or
/// carry a comment), skipping lines inside multi-line strings and arrays.
fn header_end(text: &str, doc: &DeTable<'_>, keys: &[&str]) -> Option<usize> {
    let mut values = Vec::new();
    value_spans(doc, &mut values);
    let mut wanted = Table::new();
    for key in keys.iter().rev() {
        let mut outer = Table::new();
        outer.insert((*key).to_owned(), Value::Table(wanted));
        wanted = outer;
    }
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let head = line.trim_start();
        if !head.starts_with('[') || head.starts_with("[[") {
            continue;
        }
        if values.iter().any(|s| s.start < start && start < s.end) {
            continue;
        }
        if toml::from_str::<Table>(line).is_ok_and(|t| t == wanted) {
            return Some(at);
        }
    }
    None
}

/// The places of every string and array value under `table` (where a line may look like a
/// header without being one).
fn value_spans(table: &DeTable<'_>, out: &mut Vec<std::ops::Range<usize>>) {
    for (_, value) in table.iter() {
        match value.get_ref() {
            DeValue::Table(t) => value_spans(t, out),
            DeValue::String(_) | DeValue::Array(_) => out.push(value.span()),
            _ => {}
        }
    }
}

/// Checks that `new` means `old` with `tool` added to the list at `keys` + `auto_approve`.
fn verify(old: &str, new: &str, keys: &[&str], tool: &str) -> std::result::Result<(), String> {
    let broke = || "the edit would change more than the list".to_string();
    let mut expected: Table = toml::from_str(old).map_err(|_| broke())?;
    let mut table = &mut expected;
    for key in keys {
        let slot = table
            .entry((*key).to_owned())
            .or_insert_with(|| Value::Table(Table::new()));
        table = slot.as_table_mut().ok_or_else(broke)?;
    }
    let list = table
        .entry("auto_approve".to_owned())
        .or_insert_with(|| Value::Array(Vec::new()));
    list.as_array_mut()
        .ok_or_else(broke)?
        .push(Value::String(tool.to_owned()));
    let got: Table = toml::from_str(new).map_err(|_| broke())?;
    if got == expected {
        Ok(())
    } else {
        Err(broke())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# my config\n[model]\npath = \"/m\"  # the model\n\n\
                        [mcp.servers.files]   # notes\ncommand = \"npx\"\n\
                        args = [\"-y\", \"srv\"]\n\n[mcp.servers.\"web search\"]\n\
                        url = \"http://h/mcp\"\nauto_approve = [\n  \"search\", # safe\n]\n";

    fn add(text: &str, server: &str, tool: &str) -> Option<String> {
        add_auto_approve(text, server, tool).expect("editable")
    }

    #[test]
    fn a_server_written_inline_or_in_dotted_keys_is_refused_not_saved() {
        for text in [
            "mcp.servers.h = { command = \"python3\", args = [\"s.py\"] }\n",
            "[mcp]\nservers.h = { command = \"python3\" }\n",
            "[mcp.servers]\nh.command = \"python3\"\n",
        ] {
            let err = add_auto_approve(text, "h", "probe").expect_err(text);
            assert!(
                err.contains("not written as a table header"),
                "{text}: {err}"
            );
        }
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("config.toml");
        let text = "mcp.servers.h = { command = \"python3\" }\n";
        std::fs::write(&path, text).expect("write");
        let err = plan_auto_approve(&path, "h", "probe").expect_err("inline");
        assert!(err.to_string().contains("by hand"), "{err}");
        assert!(save_auto_approve(&path, "h", "probe").is_err());
        assert_eq!(std::fs::read_to_string(&path).expect("read"), text);
    }

    #[test]
    fn a_line_goes_under_the_server_s_header_and_nothing_else_moves() {
        let new = add(FILE, "files", "read").expect("changed");
        assert_eq!(
            new,
            FILE.replace(
                "[mcp.servers.files]   # notes\n",
                "[mcp.servers.files]   # notes\nauto_approve = [\"read\"]\n"
            )
        );
        assert!(Config::from_layers(Some((Path::new("u.toml"), &new))).is_ok());
    }

    #[test]
    fn an_existing_list_grows_and_a_listed_tool_changes_nothing() {
        let new = add(FILE, "web search", "fetch \"x\"").expect("changed");
        let c = Config::from_layers(Some((Path::new("u.toml"), &new))).expect("valid");
        assert_eq!(
            c.mcp.servers["web search"].auto_approve,
            ["search", "fetch \"x\""]
        );
        assert!(new.starts_with("# my config\n[model]\npath = \"/m\"  # the model\n"));
        assert_eq!(add(&new, "web search", "search"), None);
    }

    #[test]
    fn built_ins_go_to_the_tools_table_made_when_missing() {
        let new = add(FILE, BUILTIN, "read_file").expect("changed");
        assert_eq!(
            new,
            format!("{FILE}\n[tools]\nauto_approve = [\"read_file\"]\n")
        );
        let again = add(&new, BUILTIN, "fetch_url").expect("changed");
        let c = Config::from_layers(Some((Path::new("u.toml"), &again))).expect("valid");
        assert_eq!(c.tools.auto_approve, ["read_file", "fetch_url"]);
        assert_eq!(
            add("", BUILTIN, "fetch_url").expect("changed"),
            "[tools]\nauto_approve = [\"fetch_url\"]\n"
        );
        let with = "[tools]\nfetch_url = true\n[ui]\ntheme = \"light\"";
        assert_eq!(
            add(with, BUILTIN, "fetch_url").expect("changed"),
            "[tools]\nauto_approve = [\"fetch_url\"]\nfetch_url = true\n[ui]\ntheme = \"light\""
        );
    }

    #[test]
    fn what_cannot_be_edited_safely_is_refused() {
        let e = add_auto_approve(FILE, "nope", "t").expect_err("no server");
        assert!(e.contains("no [mcp.servers.nope]"), "{e}");
        let inline = "mcp = { servers = { a = { command = \"x\" } } }\n";
        assert!(add_auto_approve(inline, "a", "t").is_err());
        let dotted = "tools.fetch_url = true\n";
        assert!(add_auto_approve(dotted, BUILTIN, "fetch_url").is_err());
        let fake =
            "[model]\npath = \"\"\"\n[mcp.servers.a]\n\"\"\"\n[mcp.servers.a]\ncommand = \"x\"\n";
        let new = add(fake, "a", "t").expect("changed");
        assert!(
            new.ends_with("[mcp.servers.a]\nauto_approve = [\"t\"]\ncommand = \"x\"\n"),
            "{new}"
        );
        assert!(add_auto_approve("[mcp.servers.a]\nauto_approve = \"t\"\n", "a", "u").is_err());
    }

    #[test]
    fn the_saver_writes_the_file_and_keeps_a_symlink() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real.toml");
        std::fs::write(&real, FILE).expect("write");
        let link = dir.path().join("config.toml");
        #[cfg(unix)]
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        #[cfg(not(unix))]
        std::fs::copy(&real, &link).expect("copy");
        assert!(save_auto_approve(&link, "files", "read").expect("saved"));
        assert!(!save_auto_approve(&link, "files", "read").expect("saved"));
        let c = Config::load(Some(&link)).expect("valid");
        assert_eq!(c.mcp.servers["files"].auto_approve, ["read"]);
        #[cfg(unix)]
        assert!(
            std::fs::symlink_metadata(&link)
                .expect("meta")
                .file_type()
                .is_symlink()
        );
        let fresh = dir.path().join("sub/new.toml");
        assert!(save_auto_approve(&fresh, BUILTIN, "fetch_url").expect("saved"));
        assert!(save_auto_approve(&fresh, "files", "x").is_err());
    }
}
