//! Snapshot bytes exactly as the protocol defines them (docs/protocol.md §4).
//!
//! The bytes are what Python's `json.dumps(obj, sort_keys=True,
//! separators=(",", ":"))` prints: no spaces, keys sorted, non-ASCII escaped
//! as `\uXXXX` (surrogate pairs above U+FFFF). An object whose keys are all
//! integers (block numbers in the model) sorts them numerically. Numbers keep
//! their exact digits: integers as written, however large; fractions as
//! Python's `repr(float)` would print them.

use std::{borrow::Cow, fmt::Write as _};

pub fn canonical_json(text: &str) -> Result<Vec<u8>, String> {
    canonical(text, None)
}

/// [`canonical_json`], with what in `text` the rules take silently but an
/// author most likely did not mean (docs/protocol.md §4): a number that is
/// not an integer (printed as Python's `repr(float)`; models carry decimals
/// as strings), a key given twice in one object (the last value is kept),
/// and a top level that is not an object. Each names where it is.
pub fn canonical_json_with_notes(text: &str) -> Result<(Vec<u8>, Vec<String>), String> {
    let mut notes = Vec::new();
    let bytes = canonical(text, Some(&mut notes))?;
    if !text.trim_start().starts_with('{') {
        notes.push("the top level is not an object: a snapshot is a JSON object of the model's fields".into());
    }
    Ok((bytes, notes))
}

/// Whether `text` is already its own canonical form (`canonical_json(text)`
/// would give its bytes back): what every reader of a snapshot checks. A
/// snapshot of integers, printable-ASCII strings and keys in their order (the
/// usual one) is proved so in one pass, with nothing built or copied;
/// anything else (a fraction, an escape, a space, keys out of order) takes
/// [`canonical_json`]'s whole path. `Err` when `text` is not JSON.
pub fn is_canonical(text: &str) -> Result<bool, String> {
    let mut plain = Plain { s: text.as_bytes(), i: 0 };
    if plain.value(0).is_some() && plain.i == plain.s.len() {
        return Ok(true);
    }
    canonical(text, None).map(|c| c == text.as_bytes())
}

/// [`is_canonical`]'s one pass: `Some` only where the document so far is
/// certainly written as [`write_value`] writes it; `None` for anything it
/// does not prove (which is not to say the document is not canonical).
struct Plain<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Plain<'a> {
    fn value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match *self.s.get(self.i)? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => self.string().map(|_| ()),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.integer(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.s[self.i..].starts_with(word).then(|| self.i += word.len())
    }

    /// A string of printable ASCII without quotes or backslashes: written
    /// as it is.
    fn string(&mut self) -> Option<&'a str> {
        let start = self.i + 1;
        let len = self.s[start..].iter().position(|&b| !(0x20..0x7f).contains(&b) || b == b'"' || b == b'\\')?;
        if self.s[start + len] != b'"' {
            return None;
        }
        self.i = start + len + 1;
        std::str::from_utf8(&self.s[start..start + len]).ok()
    }

    /// An integer in its shortest form (not `-0`): written as it is.
    fn integer(&mut self) -> Option<()> {
        let start = self.i;
        if self.s[self.i] == b'-' {
            self.i += 1;
        }
        let digits = self.s[self.i..].iter().take_while(|b| b.is_ascii_digit()).count();
        let first = *self.s.get(self.i)?;
        if digits == 0 || (first == b'0' && (digits > 1 || self.i > start)) {
            return None;
        }
        self.i += digits;
        match self.s.get(self.i) {
            Some(b'.' | b'e' | b'E') => None,
            _ => Some(()),
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        self.i += 1;
        if self.s.get(self.i) == Some(&b']') {
            self.i += 1;
            return Some(());
        }
        loop {
            self.value(depth + 1)?;
            match *self.s.get(self.i)? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An object whose keys are each greater than the one before: in
    /// number order when every key is an integer, in text order otherwise
    /// (so none is given twice).
    fn object(&mut self, depth: usize) -> Option<()> {
        self.i += 1;
        if self.s.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Some(());
        }
        let (mut last, mut last_number) = (None::<&str>, None::<i128>);
        let (mut all_integers, mut text_order, mut number_order) = (true, true, true);
        loop {
            if self.s.get(self.i) != Some(&b'"') {
                return None;
            }
            let key = self.string()?;
            if self.s.get(self.i) != Some(&b':') {
                return None;
            }
            self.i += 1;
            self.value(depth + 1)?;
            if all_integers {
                match integer_key(key) {
                    Some(n) => {
                        number_order &= last_number.is_none_or(|l| l < n);
                        last_number = Some(n);
                    }
                    None => all_integers = false,
                }
            }
            text_order &= last.is_none_or(|l| l < key);
            last = Some(key);
            match *self.s.get(self.i)? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    let in_order = if all_integers { number_order } else { text_order };
                    return in_order.then_some(());
                }
                _ => return None,
            }
        }
    }
}

fn canonical(text: &str, notes: Option<&mut Vec<String>>) -> Result<Vec<u8>, String> {
    let mut parser = Parser { s: text.as_bytes(), i: 0, notes };
    parser.ws();
    let value = parser.value(0)?;
    parser.ws();
    if parser.i != parser.s.len() {
        return Err(parser.error("trailing characters after the JSON value"));
    }
    let mut out = String::with_capacity(text.len());
    write_value(&value, &mut out)?;
    Ok(out.into_bytes())
}

enum Json<'a> {
    Null,
    Bool(bool),
    Int(Cow<'a, str>),
    Float(f64),
    Str(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    Object(Vec<(Cow<'a, str>, Json<'a>)>),
}

const MAX_DEPTH: usize = 128;

struct Parser<'a, 'n> {
    s: &'a [u8],
    i: usize,
    /// Where [`canonical_json_with_notes`] collects its notes.
    notes: Option<&'n mut Vec<String>>,
}

impl<'a> Parser<'a, '_> {
    /// Notes `what` at the current place, when notes are asked for.
    fn note(&mut self, what: impl FnOnce() -> String) {
        if self.notes.is_none() {
            return;
        }
        let line = self.error(&what());
        if let Some(notes) = &mut self.notes {
            notes.push(line);
        }
    }

    fn error(&self, what: &str) -> String {
        let before = &self.s[..self.i.min(self.s.len())];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let column = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
        format!("snapshot JSON, line {line} column {column}: {what}")
    }

    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn eat(&mut self, lit: &str) -> bool {
        if self.s[self.i..].starts_with(lit.as_bytes()) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json<'a>, String> {
        if depth > MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        match self.s.get(self.i) {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(Json::Str),
            Some(b't') if self.eat("true") => Ok(Json::Bool(true)),
            Some(b'f') if self.eat("false") => Ok(Json::Bool(false)),
            Some(b'n') if self.eat("null") => Ok(Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.error("expected a JSON value")),
            None => Err(self.error("unexpected end of input")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Json<'a>, String> {
        self.i += 1;
        let mut fields: Vec<(Cow<'a, str>, Json<'a>)> = Vec::new();
        self.ws();
        if self.eat("}") {
            return Ok(Json::Object(fields));
        }
        loop {
            self.ws();
            if self.s.get(self.i) != Some(&b'"') {
                return Err(self.error("expected a string key"));
            }
            let key = self.string()?;
            if self.notes.is_some() && fields.iter().any(|(k, _)| *k == key) {
                self.note(|| format!("key \"{key}\" is given twice in one object; only the last value is kept"));
            }
            self.ws();
            if !self.eat(":") {
                return Err(self.error("expected ':'"));
            }
            self.ws();
            let value = self.value(depth + 1)?;
            fields.push((key, value));
            self.ws();
            if self.eat(",") {
                continue;
            }
            if self.eat("}") {
                return Ok(Json::Object(last_of_each_key(fields)));
            }
            return Err(self.error("expected ',' or '}'"));
        }
    }

    fn array(&mut self, depth: usize) -> Result<Json<'a>, String> {
        self.i += 1;
        let mut items = Vec::new();
        self.ws();
        if self.eat("]") {
            return Ok(Json::Array(items));
        }
        loop {
            self.ws();
            items.push(self.value(depth + 1)?);
            self.ws();
            if self.eat(",") {
                continue;
            }
            if self.eat("]") {
                return Ok(Json::Array(items));
            }
            return Err(self.error("expected ',' or ']'"));
        }
    }

    fn number(&mut self) -> Result<Json<'a>, String> {
        let start = self.i;
        self.eat("-");
        let digits = |p: &mut Self| {
            let from = p.i;
            while p.i < p.s.len() && p.s[p.i].is_ascii_digit() {
                p.i += 1;
            }
            p.i - from
        };
        let int_start = self.i;
        let n = digits(self);
        if n == 0 || (n > 1 && self.s[int_start] == b'0') {
            return Err(self.error("invalid number"));
        }
        let mut is_int = true;
        if self.eat(".") {
            is_int = false;
            if digits(self) == 0 {
                return Err(self.error("invalid number"));
            }
        }
        if matches!(self.s.get(self.i), Some(b'e' | b'E')) {
            is_int = false;
            self.i += 1;
            if matches!(self.s.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if digits(self) == 0 {
                return Err(self.error("invalid number"));
            }
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).expect("ASCII");
        if is_int {
            Ok(Json::Int(Cow::Borrowed(if text == "-0" { "0" } else { text })))
        } else {
            let f: f64 = text.parse().map_err(|_| self.error("invalid number"))?;
            if !f.is_finite() {
                return Err(self.error("number out of range"));
            }
            self.note(|| {
                let shown = python_float_repr(f);
                format!(
                    "{text} is not an integer: it is stored as the float {shown}, which other languages may print \
                     differently; carry decimals as strings"
                )
            });
            Ok(Json::Float(f))
        }
    }

    /// A string value or key: borrowed from the document when it has no
    /// escapes (most do), built otherwise.
    fn string(&mut self) -> Result<Cow<'a, str>, String> {
        self.i += 1;
        let start = self.i;
        while self.s.get(self.i).is_some_and(|&b| b != b'"' && b != b'\\' && b >= 0x20) {
            self.i += 1;
        }
        if self.s.get(self.i) == Some(&b'"') {
            let run = std::str::from_utf8(&self.s[start..self.i]).map_err(|_| self.error("invalid UTF-8"))?;
            self.i += 1;
            return Ok(Cow::Borrowed(run));
        }
        let mut out =
            String::from(std::str::from_utf8(&self.s[start..self.i]).map_err(|_| self.error("invalid UTF-8"))?);
        loop {
            let Some(&b) = self.s.get(self.i) else { return Err(self.error("unterminated string")) };
            match b {
                b'"' => {
                    self.i += 1;
                    return Ok(Cow::Owned(out));
                }
                b'\\' => {
                    self.i += 1;
                    let Some(&e) = self.s.get(self.i) else { return Err(self.error("unterminated escape")) };
                    self.i += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            let c = if (0xd800..0xdc00).contains(&hi) && self.eat("\\u") {
                                let lo = self.hex4()?;
                                if !(0xdc00..0xe000).contains(&lo) {
                                    return Err(self.error("unpaired surrogate"));
                                }
                                0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
                            } else {
                                hi
                            };
                            out.push(char::from_u32(c).ok_or_else(|| self.error("unpaired surrogate"))?);
                        }
                        _ => return Err(self.error("invalid escape")),
                    }
                }
                0..=0x1f => return Err(self.error("control character in string")),
                _ => {
                    // A run of ordinary characters at once: it ends at an
                    // ASCII delimiter, so it is whole characters, and each
                    // byte is looked at once (the document is linear to read).
                    let start = self.i;
                    while self.s.get(self.i).is_some_and(|&b| b != b'"' && b != b'\\' && b >= 0x20) {
                        self.i += 1;
                    }
                    let run = std::str::from_utf8(&self.s[start..self.i]).map_err(|_| self.error("invalid UTF-8"))?;
                    out.push_str(run);
                }
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let digits = self.s.get(self.i..self.i + 4).ok_or_else(|| self.error("short \\u escape"))?;
        let text = std::str::from_utf8(digits).map_err(|_| self.error("bad \\u escape"))?;
        let v = u32::from_str_radix(text, 16).map_err(|_| self.error("bad \\u escape"))?;
        self.i += 4;
        Ok(v)
    }
}

/// Python keeps the last of duplicate keys; without duplicates (the usual
/// case) the fields come back as they are. Linear in the number of fields.
fn last_of_each_key<'a>(fields: Vec<(Cow<'a, str>, Json<'a>)>) -> Vec<(Cow<'a, str>, Json<'a>)> {
    let mut seen = std::collections::HashSet::with_capacity(fields.len());
    if fields.iter().all(|(k, _)| seen.insert(k.as_ref())) {
        return fields;
    }
    let mut seen = std::collections::HashSet::with_capacity(fields.len());
    let mut kept: Vec<(Cow<'a, str>, Json<'a>)> =
        fields.into_iter().rev().filter(|(k, _)| seen.insert(k.clone())).collect();
    kept.reverse();
    kept
}

fn write_value(v: &Json<'_>, out: &mut String) -> Result<(), String> {
    match v {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Int(digits) => out.push_str(digits),
        Json::Float(f) => out.push_str(&python_float_repr(*f)),
        Json::Str(s) => write_string(s, out),
        Json::Array(items) => {
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                write_value(item, out)?;
            }
            out.push(']');
        }
        Json::Object(fields) => {
            let mut sorted: Vec<&(Cow<'_, str>, Json<'_>)> = fields.iter().collect();
            let numeric: Option<Vec<i128>> = fields.iter().map(|(k, _)| integer_key(k)).collect();
            match numeric {
                Some(keys) if !keys.is_empty() => {
                    let mut order: Vec<usize> = (0..fields.len()).collect();
                    order.sort_by_key(|&i| keys[i]);
                    sorted = order.into_iter().map(|i| &fields[i]).collect();
                }
                _ => sorted.sort_by(|a, b| a.0.cmp(&b.0)),
            }
            out.push('{');
            for (n, (k, value)) in sorted.into_iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                write_string(k, out);
                out.push(':');
                write_value(value, out)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// A key that prints as an integer in Python (`str(int)`), e.g. a block number.
fn integer_key(k: &str) -> Option<i128> {
    let digits = k.strip_prefix('-').unwrap_or(k);
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && k != "-0";
    canonical.then(|| k.parse().ok()).flatten()
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    // Printable ASCII without quotes or backslashes (keys, numbers as
    // strings, addresses: nearly everything) is copied as it is.
    if s.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\') {
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: the shortest round-tripping digits, fixed notation
/// for exponents from -4 to 15, else `d.ddde±XX`.
fn python_float_repr(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    let sci = format!("{f:e}"); // e.g. "-1.2345e-7", shortest digits
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("integer exponent");
    let (sign, mantissa) = mantissa.strip_prefix('-').map_or(("", mantissa), |m| ("-", m));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        if point <= 0 {
            format!("{sign}0.{}{digits}", "0".repeat((-point) as usize))
        } else if point as usize >= digits.len() {
            format!("{sign}{digits}{}.0", "0".repeat(point as usize - digits.len()))
        } else {
            format!("{sign}{}.{}", &digits[..point as usize], &digits[point as usize..])
        }
    } else {
        let rest = if digits.len() > 1 { format!(".{}", &digits[1..]) } else { String::new() };
        format!("{sign}{}{rest}e{}{:02}", &digits[..1], if exp < 0 { '-' } else { '+' }, exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_rules_take_silently_is_noted_with_its_place() {
        let notes = |text: &str| canonical_json_with_notes(text).unwrap().1;
        assert!(notes(r#"{"a": 1, "b": "0.1", "9": {"10": 2}}"#).is_empty());
        let floats = notes(r#"{"a": 0.1, "b": 1e21}"#);
        assert_eq!(floats.len(), 2, "{floats:?}");
        assert!(floats[0].contains("line 1 column 10: 0.1 is not an integer"), "{floats:?}");
        assert!(floats[1].contains("1e21 is not an integer: it is stored as the float 1e+21"), "{floats:?}");
        let twice = notes("{\"a\": 1,\n \"a\": 2}");
        assert_eq!(twice.len(), 1, "{twice:?}");
        assert!(twice[0].contains("line 2 column 5: key \"a\" is given twice"), "{twice:?}");
        let (bytes, top) = canonical_json_with_notes("[1, 2]").unwrap();
        assert_eq!(bytes, b"[1,2]", "the bytes are canonical_json's");
        assert!(top[0].starts_with("the top level is not an object"), "{top:?}");
    }

    /// A JSON text from `seed`: objects with keys in any order (numbers,
    /// words, both), integers, fractions, strings with and without escapes.
    fn arbitrary(seed: &mut u64, depth: usize) -> String {
        fn draw(seed: &mut u64, n: u64) -> u64 {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            *seed % n
        }
        let keys = ["a", "b", "ab", "B", "9", "10", "100", "-1", "01", "x y", "\\u00e9"];
        let scalars = ["0", "-0", "7", "-12", "1.5", "1e3", "true", "false", "null", "\"s\"", "\"\\n\"", "\"é\""];
        match draw(seed, if depth > 3 { 2 } else { 4 }) {
            0 | 1 => scalars[draw(seed, scalars.len() as u64) as usize].to_owned(),
            2 => {
                let n = draw(seed, 4);
                let items: Vec<String> = (0..n).map(|_| arbitrary(seed, depth + 1)).collect();
                format!("[{}]", items.join(","))
            }
            _ => {
                let n = draw(seed, 5);
                let fields: Vec<String> = (0..n)
                    .map(|_| {
                        let key = keys[draw(seed, keys.len() as u64) as usize];
                        format!("\"{key}\":{}", arbitrary(seed, depth + 1))
                    })
                    .collect();
                format!("{{{}}}", fields.join(","))
            }
        }
    }

    #[test]
    fn is_canonical_says_what_comparing_with_the_canonical_form_says() {
        let whole = |t: &str| canonical_json(t).map(|c| c == t.as_bytes());
        let mut seed = 0x2545_F491_4F6C_DD1D;
        // The one pass proves a text canonical only when it is.
        let proved = |t: &str| {
            let mut plain = Plain { s: t.as_bytes(), i: 0 };
            plain.value(0).is_some() && plain.i == t.len()
        };
        let (mut canonical, mut not, mut in_one_pass) = (0, 0, 0);
        for _ in 0..20_000 {
            let text = arbitrary(&mut seed, 0);
            // The text, its canonical form, and each with a space put in.
            let formed = canonical_json(&text).map(|c| String::from_utf8(c).unwrap()).unwrap_or_default();
            for t in [text.clone(), formed.clone(), format!("{formed} "), formed.replacen(':', ": ", 1)] {
                assert_eq!(is_canonical(&t), whole(&t), "{t}");
                if proved(&t) {
                    assert_eq!(whole(&t), Ok(true), "the one pass proved {t}");
                    in_one_pass += 1;
                }
                if whole(&t) == Ok(true) { canonical += 1 } else { not += 1 }
            }
        }
        assert!(canonical > 10_000 && not > 10_000, "both kinds drawn: {canonical} canonical, {not} not");
        assert!(in_one_pass > canonical / 2, "{in_one_pass} of {canonical} canonical texts proved in one pass");
        for t in ["", "-", "01", "[1,]", "{\"a\":1,}", "{\"a\"1}", "\"open", "[1 ]", "{\"b\":1,\"a\":2}", "12x"] {
            assert_eq!(is_canonical(t), whole(t), "{t}");
        }
        assert_eq!(is_canonical(r#"{"9":1,"10":2}"#), Ok(true), "integer keys in number order");
        assert_eq!(is_canonical(r#"{"10":1,"9":2}"#), Ok(false));
        assert_eq!(is_canonical(r#"{"10":1,"9":2,"x":3}"#), Ok(true), "mixed keys in text order");
        assert_eq!(is_canonical(r#"{"a":1,"a":1}"#), Ok(false), "a key given twice is not canonical");
    }

    fn canon(text: &str) -> String {
        String::from_utf8(canonical_json(text).unwrap()).unwrap()
    }

    #[test]
    fn sorts_escapes_and_keeps_numbers_exact() {
        assert_eq!(canon(r#" { "b" : 1, "a" : [true, null, "x"] } "#), r#"{"a":[true,null,"x"],"b":1}"#);
        assert_eq!(canon(r#"{"10":"a","9":"b","100":"c"}"#), r#"{"9":"b","10":"a","100":"c"}"#);
        assert_eq!(canon(r#"{"10":1,"9":2,"x":3}"#), r#"{"10":1,"9":2,"x":3}"#, "mixed keys sort as strings");
        assert_eq!(canon(r#"{"t":"Ünï 🦄 \u00e9 é"}"#), r#"{"t":"\u00dcn\u00ef \ud83e\udd84 \u00e9 \u00e9"}"#);
        assert_eq!(
            canon("[123456789012345678901234567890, -0, 1.0, 1e-7, 2.5e20, 0.1]"),
            "[123456789012345678901234567890,0,1.0,1e-07,2.5e+20,0.1]"
        );
        assert_eq!(
            canon(r#""a\/b\"\\\n\u0001\u007f""#),
            r#""a/b\"\\\n\u0001\u007f""#,
            "DEL is escaped, as Python does"
        );
        assert_eq!(canon(r#"{"a":1,"a":2}"#), r#"{"a":2}"#, "the last duplicate wins, as in Python");
        assert_eq!(canon(r#"{"b":1,"a":2,"b":3,"a":4,"c":5}"#), r#"{"a":4,"b":3,"c":5}"#);
        assert_eq!(
            canon(r#"["plain run\tthen é and \"q\"", "\u00e9x"]"#),
            r#"["plain run\tthen \u00e9 and \"q\"","\u00e9x"]"#
        );
    }

    #[test]
    fn python_float_repr_matches() {
        for (f, repr) in [
            (1e16, "1e+16"),
            (1234.5, "1234.5"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.0, "-2.0"),
            (123456789012345.6, "123456789012345.6"),
        ] {
            assert_eq!(python_float_repr(f), repr);
        }
    }

    #[test]
    fn bad_json_names_line_and_column() {
        let err = canonical_json("{\n  \"a\": 01\n}").unwrap_err();
        assert_eq!(err, "snapshot JSON, line 2 column 10: invalid number");
        assert!(canonical_json("[1,]").is_err());
        assert!(canonical_json("{} x").unwrap_err().contains("trailing"));
    }

    /// Differential check against CPython's own `json.dumps` on generated
    /// documents (objects always mix in a non-integer key, where the two
    /// rules agree by definition).
    #[test]
    fn agrees_with_cpython_json_dumps() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let alphabet = [
            "a",
            "Z",
            "é",
            "€",
            "🦄",
            r"\\",
            r#"\""#,
            r"\n",
            r"\u0007",
            " ",
            "0",
            "中",
            r"\ud83d\ude00",
            "/",
            "\u{7f}",
        ];
        let mut docs = Vec::new();
        for _ in 0..300 {
            let mut doc = String::from("{\"k\":[");
            for n in 0..(next() % 6) {
                if n > 0 {
                    doc.push(',');
                }
                match next() % 6 {
                    0 => doc.push_str(&format!("{}", next() as i64)),
                    1 => doc.push_str(&format!("{}{}", next(), next())),
                    2 => doc.push_str(&format!("{:e}", f64::from_bits(next() >> 2))),
                    3 => doc.push_str(&format!("{}.{}", next() % 1000, next() % 1000)),
                    4 => {
                        doc.push('"');
                        for _ in 0..next() % 5 {
                            doc.push_str(alphabet[(next() % alphabet.len() as u64) as usize]);
                        }
                        doc.push('"');
                    }
                    _ => doc.push_str(&format!("{{\"z{}\":null,\"{}\":true,\"A\":[]}}", next() % 9, next() % 100)),
                }
            }
            doc.push_str("]}");
            docs.push(doc);
        }
        let script = "import json,sys\nfor line in sys.stdin:\n    print(json.dumps(json.loads(line), sort_keys=True, separators=(',', ':')))\n";
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            for d in &docs {
                writeln!(stdin, "{d}").unwrap();
            }
        }
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let expected: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
        assert_eq!(expected.len(), docs.len());
        for (doc, want) in docs.iter().zip(expected) {
            assert_eq!(canon(doc), want, "input {doc}");
        }
    }

    #[test]
    fn conformance_vectors() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/conformance/canonical_json_cid_cases.json");
        let cases: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert!(cases.len() >= 5);
        for case in cases {
            let text = case["canonical_json"].as_str().unwrap();
            // Canonical input comes back unchanged, and so does a messy rewrite of it.
            assert_eq!(canon(text), text, "{}", case["name"]);
            let messy =
                serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(text).unwrap()).unwrap();
            if case["name"] != "integer_keys_numeric_order" {
                assert_eq!(canon(&messy), text, "{}", case["name"]);
            }
            assert_eq!(crate::cid(text.as_bytes()), case["cid"].as_str().unwrap(), "{}", case["name"]);
        }
    }
}
