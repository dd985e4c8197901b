//! Gemma 4's tool-call syntax: written as the official chat template writes it ([`format`]),
//! read leniently from models and servers ([`parse`]), and enforced while sampling: the declared
//! tools' schemas compiled into a grammar ([`CallGrammar`]), walked symbol by symbol
//! ([`Matcher`]), finished by force when a call runs long, and read token by token through the
//! model's vocabulary ([`Vocab`]).

mod complete;
pub mod format;
mod grammar;
mod matcher;
pub mod parse;
mod reader;
mod scalars;
mod schema;
mod step;
mod vocab;

pub use format::{
    Piece, QUOTE, ToolResponse, call_pieces, format_call, format_number, format_response,
    format_value, render, response_pieces, value_pieces,
};
pub use grammar::{CallGrammar, GrammarError};
pub use matcher::{Matcher, Sym};
pub use parse::{CALL_CLOSE, CALL_OPEN, ParseError, ParsedCall, parse_call, parse_calls};
pub use vocab::Vocab;
