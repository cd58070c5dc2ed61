//! The parser of client-go's JSONPath templates (`util/jsonpath`), rune
//! for rune: what it accepts, the nodes it makes of it, and where it fails
//! (a custom resource's printer column whose path fails to parse is not
//! printed as the API server prints it, so it is refused).

/// One node of a parsed template.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    /// A sequence evaluated in turn (`{...}`, a filter's side, a union's part).
    List(Vec<Node>),
    /// Literal text (outside braces, or quoted).
    Text(String),
    /// `.name`: a key of a map.
    Field(String),
    /// `[start:end:step]`, `[index]`.
    Array([Param; 3]),
    /// `[?(left op right)]`, or `[?(path)]` (op "exists").
    Filter {
        left: Vec<Node>,
        right: Vec<Node>,
        operator: String,
    },
    /// An integer literal (a Go `int`).
    Int(i64),
    /// A float literal.
    Float(f64),
    /// `true` or `false`.
    Bool(bool),
    /// `*`, `.*`: every value.
    Wildcard,
    /// `..`: every container below.
    Recursive,
    /// `[a,b]`: each part's results.
    Union(Vec<Vec<Node>>),
    /// Any other word (`range`, `end`, and words the evaluator refuses).
    Identifier(String),
}

/// One of an array node's three parameters (ParamsEntry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Param {
    pub(crate) value: i64,
    pub(crate) known: bool,
    /// The end of `[i]`, derived as i+1.
    pub(crate) derived: bool,
}

/// Why a template does not parse (the message is client-go's, for tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError(pub(crate) String);

type Parsed<T> = Result<T, ParseError>;

fn err<T>(message: impl Into<String>) -> Parsed<T> {
    Err(ParseError(message.into()))
}

/// How deep parses may nest: a filter's sides, a union's parts and a
/// quoted key are parsed again on their own (`[?(@.a[?(@.b)])]` is two
/// deep), and evaluated recursively, so the bound keeps the stack bounded.
/// client-go has none; a path nested deeper is refused.
pub(crate) const MAX_NESTING: usize = 8;

/// Parses `text` into its root's nodes.
pub(crate) fn parse(text: &str) -> Parsed<Vec<Node>> {
    parse_nested(text, 0)
}

/// Parses `text`, the side of a filter nested `depth` filters deep.
fn parse_nested(text: &str, depth: usize) -> Parsed<Vec<Node>> {
    if depth > MAX_NESTING {
        return err(format!("nested deeper than {MAX_NESTING}"));
    }
    let mut p = Parser {
        input: text.as_bytes(),
        text,
        pos: 0,
        start: 0,
        width: 0,
        depth,
        root: Vec::new(),
    };
    p.parse_text()?;
    Ok(p.root)
}

/// `parseAction`: parses `{text}` and takes its first node's list.
fn parse_action(text: &str, depth: usize) -> Parsed<Vec<Node>> {
    let nodes = parse_nested(&format!("{{{text}}}"), depth)?;
    match nodes.into_iter().next() {
        Some(Node::List(list)) => Ok(list),
        _ => err("unclosed action"),
    }
}

struct Parser<'a> {
    input: &'a [u8],
    text: &'a str,
    pos: usize,
    start: usize,
    width: usize,
    /// How many filters this text is nested in.
    depth: usize,
    /// The root's nodes; an action's nodes are built in a list of their
    /// own, pushed here when it closes.
    root: Vec<Node>,
}

const EOF: Option<char> = None;

/// The refusal of a character the parser would classify by Unicode class.
const UNICODE: &str = "a character outside ASCII where the parser tells digits and letters apart";

impl Parser<'_> {
    fn consume_text(&mut self) -> String {
        let value = self.text[self.start..self.pos].to_owned();
        self.start = self.pos;
        value
    }

    fn next(&mut self) -> Option<char> {
        if self.pos >= self.input.len() {
            self.width = 0;
            return EOF;
        }
        let c = self.text[self.pos..].chars().next()?;
        self.width = c.len_utf8();
        self.pos += self.width;
        Some(c)
    }

    fn peek(&mut self) -> Option<char> {
        let c = self.next();
        self.backup();
        c
    }

    fn backup(&mut self) {
        self.pos -= self.width;
    }

    fn rest(&self) -> &str {
        &self.text[self.pos..]
    }

    fn parse_text(&mut self) -> Parsed<()> {
        loop {
            if self.rest().starts_with('{') {
                if self.pos > self.start {
                    let text = self.consume_text();
                    self.root.push(Node::Text(text));
                }
                return self.parse_left_delim();
            }
            if self.next().is_none() {
                break;
            }
        }
        if self.pos > self.start {
            let text = self.consume_text();
            self.root.push(Node::Text(text));
        }
        Ok(())
    }

    fn parse_left_delim(&mut self) -> Parsed<()> {
        self.pos += 1;
        self.consume_text();
        let mut action = Vec::new();
        self.parse_inside_action(&mut action)?;
        // parseRightDelim carried on with the root's text after the list.
        Ok(())
    }

    fn close_action(&mut self, action: &mut Vec<Node>) -> Parsed<()> {
        self.pos += 1;
        self.consume_text();
        self.root.push(Node::List(std::mem::take(action)));
        self.parse_text()
    }

    fn parse_inside_action(&mut self, cur: &mut Vec<Node>) -> Parsed<()> {
        loop {
            let rest = self.rest();
            if rest.starts_with('}') {
                return self.close_action(cur);
            }
            if rest.starts_with("[?(") {
                self.parse_filter(cur)?;
                continue;
            }
            if rest.starts_with("..") {
                if matches!(cur.last(), Some(Node::Recursive)) {
                    return err("invalid multiple recursive descent");
                }
                self.pos += 2;
                self.consume_text();
                cur.push(Node::Recursive);
                match self.peek().map(ascii_alphanumeric) {
                    Some(None) => return err(UNICODE),
                    Some(Some(true)) => self.parse_field(cur),
                    _ => {}
                }
                continue;
            }
            match self.next() {
                None | Some('\r' | '\n') => return err("unclosed action"),
                Some(' ' | '@' | '$') => {
                    self.consume_text();
                }
                Some('[') => self.parse_array(cur)?,
                Some(quote @ ('"' | '\'')) => self.parse_quote(cur, quote)?,
                Some('.') => self.parse_field(cur),
                Some(c) if !c.is_ascii() => return err(UNICODE),
                Some(c) if c == '+' || c == '-' || c.is_ascii_digit() => {
                    self.backup();
                    self.parse_number(cur)?;
                }
                Some(c) if ascii_alphanumeric(c) == Some(true) => {
                    self.backup();
                    self.parse_identifier(cur);
                }
                Some(c) => {
                    return err(format!(
                        "unrecognized character in action: U+{:04X}",
                        c as u32
                    ));
                }
            }
        }
    }

    fn parse_identifier(&mut self, cur: &mut Vec<Node>) {
        loop {
            let c = self.next();
            if is_terminator(c) {
                self.backup();
                break;
            }
        }
        let value = self.consume_text();
        cur.push(match value.as_str() {
            "true" => Node::Bool(true),
            "false" => Node::Bool(false),
            _ => Node::Identifier(value),
        });
    }

    fn parse_number(&mut self, cur: &mut Vec<Node>) -> Parsed<()> {
        if matches!(self.peek(), Some('+' | '-')) {
            self.next();
        }
        loop {
            match self.next() {
                Some(c) if c == '.' || c.is_ascii_digit() => {}
                Some(c) if !c.is_ascii() => return err(UNICODE),
                _ => {
                    self.backup();
                    break;
                }
            }
        }
        let value = self.consume_text();
        if let Some(i) = go_atoi(&value) {
            cur.push(Node::Int(i));
        } else if let Some(f) = go_parse_float(&value) {
            cur.push(Node::Float(f));
        } else {
            return err(format!("cannot parse number {value}"));
        }
        Ok(())
    }

    fn parse_array(&mut self, cur: &mut Vec<Node>) -> Parsed<()> {
        loop {
            match self.next() {
                None | Some('\n') => return err("unterminated array"),
                Some(']') => break,
                _ => {}
            }
        }
        let text = self.consume_text();
        let mut text = text[1..text.len() - 1].to_owned();
        if text == "*" {
            text = ":".to_owned();
        }
        let parts: Vec<&str> = text.split(',').collect();
        if parts.len() > 1 {
            let mut union = Vec::new();
            for part in parts {
                union.push(parse_action(
                    &format!("[{}]", part.trim_matches(' ')),
                    self.depth + 1,
                )?);
            }
            cur.push(Node::Union(union));
            return Ok(());
        }
        // A quoted key: `['a']` is `.a` (parsed as a field path).
        if let Some(key) = text
            .strip_prefix('\'')
            .and_then(|t| t.strip_suffix('\''))
            .filter(|k| !k.contains('\''))
            && text.len() >= 2
        {
            cur.extend(parse_action(&format!(".{key}"), self.depth + 1)?);
            return Ok(());
        }
        let params = slice_params(&text)
            .ok_or_else(|| ParseError(format!("invalid array index {text}")))??;
        cur.push(Node::Array(params));
        Ok(())
    }

    fn parse_filter(&mut self, cur: &mut Vec<Node>) -> Parsed<()> {
        self.pos += 3;
        self.consume_text();
        let (mut begin, mut end) = (false, false);
        let mut pair = '\0';
        loop {
            match self.next() {
                None | Some('\n') => return err("unterminated filter"),
                Some(c @ ('"' | '\'')) => {
                    if !begin {
                        begin = true;
                        pair = c;
                        continue;
                    }
                    if self.input[self.pos - 2] != b'\\' && c == pair {
                        end = true;
                    }
                }
                Some(')') if begin == end => break,
                _ => {}
            }
        }
        if self.next() != Some(']') {
            return err("unclosed array expect ]");
        }
        let text = self.consume_text();
        let text = &text[..text.len() - 2];
        match split_comparison(text) {
            None => cur.push(Node::Filter {
                left: parse_action(text, self.depth + 1)?,
                right: Vec::new(),
                operator: "exists".to_owned(),
            }),
            Some((left, operator, right)) => cur.push(Node::Filter {
                left: parse_action(left, self.depth + 1)?,
                right: parse_action(right, self.depth + 1)?,
                operator: operator.to_owned(),
            }),
        }
        Ok(())
    }

    fn parse_quote(&mut self, cur: &mut Vec<Node>, end: char) -> Parsed<()> {
        loop {
            match self.next() {
                None | Some('\n') => return err("unterminated quoted string"),
                Some(c) if c == end && self.input[self.pos - 2] != b'\\' => break,
                _ => {}
            }
        }
        let value = self.consume_text();
        let s = unquote_extend(&value)
            .ok_or_else(|| ParseError(format!("unquote string {value} error")))?;
        cur.push(Node::Text(s));
        Ok(())
    }

    fn parse_field(&mut self, cur: &mut Vec<Node>) {
        self.consume_text();
        while self.advance() {}
        let value = self.consume_text();
        cur.push(if value == "*" {
            Node::Wildcard
        } else {
            Node::Field(value.replace('\\', ""))
        });
    }

    /// Steps over one character, or an escaped one; false at a terminator.
    fn advance(&mut self) -> bool {
        let c = self.next();
        if c == Some('\\') {
            self.next();
        } else if is_terminator(c) {
            self.backup();
            return false;
        }
        true
    }
}

/// The regular expression `^([^!<>=]+)([!<>=]+)(.+?)$` of a filter.
fn split_comparison(text: &str) -> Option<(&str, &str, &str)> {
    let is_op = |c: char| matches!(c, '!' | '<' | '>' | '=');
    let left_len = text.find(is_op)?;
    if left_len == 0 {
        return None;
    }
    let mut op_len = text[left_len..]
        .find(|c| !is_op(c))
        .unwrap_or(text.len() - left_len);
    // `(.+?)$` needs a character: with nothing after the operator the
    // regular expression backtracks, giving the operator's last one.
    if left_len + op_len == text.len() {
        if op_len < 2 {
            return None;
        }
        op_len -= 1;
    }
    let right = &text[left_len + op_len..];
    // `.` matches no newline.
    if right.contains('\n') {
        return None;
    }
    Some((&text[..left_len], &text[left_len..left_len + op_len], right))
}

/// `^(-?[\d]*)(:-?[\d]*)?(:-?[\d]*)?$` and the parameters of its groups;
/// None where the expression does not match.
fn slice_params(text: &str) -> Option<Parsed<[Param; 3]>> {
    let mut groups: [&str; 3] = [""; 3];
    let mut rest = text;
    for (i, group) in groups.iter_mut().enumerate() {
        let body_start = usize::from(i > 0);
        if i > 0 && !rest.starts_with(':') {
            break;
        }
        let body = &rest[body_start..];
        let sign = usize::from(body.starts_with('-'));
        let digits = body[sign..].bytes().take_while(u8::is_ascii_digit).count();
        let len = body_start + sign + digits;
        *group = &rest[..len];
        rest = &rest[len..];
    }
    if !rest.is_empty() {
        return None;
    }
    let mut params = [Param::default(); 3];
    for i in 0..3 {
        let mut value = groups[i];
        if !value.is_empty() {
            if i > 0 {
                value = &value[1..];
            }
            if i > 0 && value.is_empty() {
                params[i].known = false;
            } else {
                params[i].known = true;
                match go_atoi(value) {
                    Some(v) => params[i].value = v,
                    None => return Some(err(format!("array index {value} is not a number"))),
                }
            }
        } else if i == 1 {
            params[i] = Param {
                value: params[0].value + 1,
                known: true,
                derived: true,
            };
        }
    }
    Some(Ok(params))
}

fn is_terminator(c: Option<char>) -> bool {
    matches!(
        c,
        None | Some(' ' | '\t' | '\r' | '\n' | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}')
    )
}

/// Go's `isAlphaNumeric` ('_', a Unicode letter or digit) for ASCII;
/// None for other characters, whose Unicode classes Go's and Rust's
/// standard libraries do not draw quite alike, so a template that puts one
/// where the parser asks is refused rather than parsed perhaps differently.
fn ascii_alphanumeric(c: char) -> Option<bool> {
    c.is_ascii().then(|| c == '_' || c.is_ascii_alphanumeric())
}

/// Go's `strconv.Atoi`: an optional sign and ASCII digits, within int64.
pub(crate) fn go_atoi(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Go's `strconv.ParseFloat(s, 64)` for the text the number scanner takes
/// (a sign, digits and dots).
fn go_parse_float(s: &str) -> Option<f64> {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    if !body.bytes().any(|b| b.is_ascii_digit())
        || !body.bytes().all(|b| b.is_ascii_digit() || b == b'.')
    {
        return None;
    }
    s.parse().ok()
}

/// client-go's `UnquoteExtend`: `strconv.Unquote` for double- or
/// single-quoted strings.
fn unquote_extend(s: &str) -> Option<String> {
    let quote = s.chars().next()?;
    if s.len() < 2 || !s.ends_with(quote) || (quote != '"' && quote != '\'') {
        return None;
    }
    let body = &s[1..s.len() - 1];
    if !body.contains('\\') && !body.contains(quote) {
        return Some(body.to_owned());
    }
    let mut out = String::new();
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c == quote {
            return None;
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        let escape = chars.next()?;
        let code = match escape {
            'a' => 7,
            'b' => 8,
            'f' => 12,
            'n' => 10,
            'r' => 13,
            't' => 9,
            'v' => 11,
            '\\' => 92,
            '\'' | '"' if escape == quote => escape as u32,
            'x' | 'u' | 'U' => {
                let n = match escape {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let mut v = 0u32;
                for _ in 0..n {
                    v = v * 16 + chars.next()?.to_digit(16)?;
                }
                if escape == 'x' {
                    // A byte: only ASCII makes a valid string here.
                    if v >= 0x80 {
                        return None;
                    }
                } else if char::from_u32(v).is_none() {
                    return None;
                }
                v
            }
            '0'..='7' => {
                let mut v = escape.to_digit(8)?;
                for _ in 0..2 {
                    v = v * 8 + chars.next()?.to_digit(8)?;
                }
                if v > 255 || v >= 0x80 {
                    return None;
                }
                v
            }
            _ => return None,
        };
        out.push(char::from_u32(code)?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(text: &str) -> Vec<Node> {
        match parse(text).unwrap().into_iter().next() {
            Some(Node::List(nodes)) => nodes,
            other => panic!("{other:?}"),
        }
    }

    fn field(name: &str) -> Node {
        Node::Field(name.to_owned())
    }

    #[test]
    fn fields_arrays_and_filters_parse_into_client_gos_nodes() {
        assert_eq!(
            list("{.spec.replicas}"),
            vec![field("spec"), field("replicas")]
        );
        assert_eq!(
            list(r"{.metadata.labels.app\.kubernetes\.io/name}"),
            vec![
                field("metadata"),
                field("labels"),
                field("app.kubernetes.io/name")
            ]
        );
        assert_eq!(list("{.a['b']}"), vec![field("a"), field("b")]);
        assert_eq!(
            list("{.items[*]}"),
            vec![
                field("items"),
                Node::Array([
                    Param::default(),
                    Param {
                        known: false,
                        value: 0,
                        derived: false
                    },
                    Param::default()
                ])
            ]
        );
        assert_eq!(
            list("{.items[-1]}")[1],
            Node::Array([
                Param {
                    value: -1,
                    known: true,
                    derived: false
                },
                Param {
                    value: 0,
                    known: true,
                    derived: true
                },
                Param::default()
            ])
        );
        assert_eq!(
            list(r#"{.status.conditions[?(@.type=="Ready")].status}"#),
            vec![
                field("status"),
                field("conditions"),
                Node::Filter {
                    left: vec![field("type")],
                    right: vec![Node::Text("Ready".to_owned())],
                    operator: "==".to_owned()
                },
                field("status"),
            ]
        );
        assert_eq!(list("{..name}"), vec![Node::Recursive, field("name")]);
        assert_eq!(
            list("{.a[0,1]}")[1],
            Node::Union(vec![
                vec![Node::Array([
                    Param {
                        value: 0,
                        known: true,
                        derived: false
                    },
                    Param {
                        value: 1,
                        known: true,
                        derived: true
                    },
                    Param::default()
                ])],
                vec![Node::Array([
                    Param {
                        value: 1,
                        known: true,
                        derived: false
                    },
                    Param {
                        value: 2,
                        known: true,
                        derived: true
                    },
                    Param::default()
                ])],
            ])
        );
    }

    #[test]
    fn text_around_actions_and_literals_parse_too() {
        assert_eq!(
            parse("a{.b}c").unwrap(),
            vec![
                Node::Text("a".to_owned()),
                Node::List(vec![field("b")]),
                Node::Text("c".to_owned())
            ]
        );
        assert_eq!(
            list("{true 3 -1.5 range}"),
            vec![
                Node::Bool(true),
                Node::Int(3),
                Node::Float(-1.5),
                Node::Identifier("range".to_owned())
            ]
        );
        assert_eq!(list(r#"{"a\tb"}"#), vec![Node::Text("a\tb".to_owned())]);
    }

    #[test]
    fn templates_client_go_refuses_do_not_parse() {
        for bad in [
            "{.a",
            "{.a[0}",
            "{.a[x]}",
            "{.a[?(@.b==1}",
            "{....a}",
            "{.a\t}",
            r#"{"a}"#,
            "{.a[1:2:x]}",
            "{ é}",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_comparison_without_a_right_side_takes_the_operators_last_character() {
        assert_eq!(split_comparison("@.a==1"), Some(("@.a", "==", "1")));
        assert_eq!(split_comparison("@.a=="), Some(("@.a", "=", "=")));
        assert_eq!(split_comparison("@.a="), None);
        assert_eq!(split_comparison("=1"), None);
        assert_eq!(split_comparison("@.a"), None);
    }

    #[test]
    fn quoted_strings_unquote_as_go_unquotes_them() {
        assert_eq!(unquote_extend(r#""a\"b""#).as_deref(), Some("a\"b"));
        assert_eq!(unquote_extend(r"'it\'s'").as_deref(), Some("it's"));
        assert_eq!(
            unquote_extend(r#""\x41\u00e9\101""#).as_deref(),
            Some("AéA")
        );
        assert_eq!(unquote_extend(r#""a"b""#), None);
        assert_eq!(unquote_extend(r#""\'""#), None);
        assert_eq!(unquote_extend(r#""\q""#), None);
    }
}
