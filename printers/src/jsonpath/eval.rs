//! Evaluating a parsed JSONPath over an object as client-go does over the
//! `map[string]interface{}` of an unstructured object (missing keys
//! allowed), including its comparisons (`text/template`'s `eq`, `lt`, ..),
//! and printing a result as `PrintResults` does.

use serde_json::Value;

use super::parser::{Node, Param};
use crate::json::{Number, write_f64_print, write_value};

/// A value the evaluator handles: a value of the object, or a literal of
/// the template (client-go's `reflect.Value`s of both).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Item<'a> {
    /// A value of the object (`null` for a key set to null, a nil
    /// interface in Go).
    Data(&'a Value),
    /// A quoted or literal text.
    Text(String),
    /// An integer literal (a Go `int`).
    Int(i64),
    /// A float literal.
    Float(f64),
    /// A boolean literal.
    Bool(bool),
    /// A byte of a string (Go indexes strings by byte).
    Byte(u8),
}

/// Why evaluating a path gives no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EvalError {
    /// client-go fails too (its message, for tests and logs): the cell
    /// has no value.
    Failed(String),
    /// The path visits more than [`MAX_VALUES`] values: client-go would
    /// go on, this port does not.
    TooMany,
}

/// How many values evaluating one path may visit, over all its steps: a
/// real printer column's path visits a handful, but `..` and unions
/// multiply what the steps after them see, so without a bound one row
/// could cost time and memory far beyond its object's size.
pub(crate) const MAX_VALUES: usize = 65_536;

type Eval<T> = Result<T, EvalError>;

fn err<T>(message: impl Into<String>) -> Eval<T> {
    Err(EvalError::Failed(message.into()))
}

/// What is left of [`MAX_VALUES`] for one evaluation.
#[derive(Debug)]
struct Budget(usize);

impl Budget {
    fn new() -> Budget {
        Budget(MAX_VALUES)
    }

    /// Spends `n` values, or fails when fewer are left.
    fn spend(&mut self, n: usize) -> Eval<()> {
        self.0 = self.0.checked_sub(n).ok_or(EvalError::TooMany)?;
        Ok(())
    }
}

/// The children of a container, in the order evaluation visits them:
/// a map's values by sorted key (Go's map order is random; this crate
/// picks one order and keeps to it), a list's items, a string's bytes.
fn children<'a>(item: &Item<'a>) -> Vec<Item<'a>> {
    match item {
        Item::Data(Value::Object(map)) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            keys.into_iter().map(|k| Item::Data(&map[k])).collect()
        }
        Item::Data(Value::Array(items)) => items.iter().map(Item::Data).collect(),
        Item::Data(Value::String(s)) => s.bytes().map(Item::Byte).collect(),
        Item::Text(s) => s.bytes().map(Item::Byte).collect(),
        _ => Vec::new(),
    }
}

/// `template.Indirect`: a nil interface (JSON null) is skipped.
fn is_nil(item: &Item<'_>) -> bool {
    matches!(item, Item::Data(Value::Null))
}

/// `FindResults` of the root's nodes: each node evaluated from the object,
/// all of them within one [`MAX_VALUES`].
pub(crate) fn find_results<'a>(nodes: &[Node], data: &'a Value) -> Eval<Vec<Vec<Item<'a>>>> {
    let mut budget = Budget::new();
    nodes
        .iter()
        .map(|node| walk(vec![Item::Data(data)], node, &mut budget))
        .collect()
}

fn eval_list<'a>(input: Vec<Item<'a>>, nodes: &[Node], budget: &mut Budget) -> Eval<Vec<Item<'a>>> {
    nodes
        .iter()
        .try_fold(input, |current, node| walk(current, node, budget))
}

fn walk<'a>(input: Vec<Item<'a>>, node: &Node, budget: &mut Budget) -> Eval<Vec<Item<'a>>> {
    let output = step(input, node, budget)?;
    budget.spend(output.len())?;
    Ok(output)
}

/// One node's evaluation (`walk` counts what it gives).
fn step<'a>(input: Vec<Item<'a>>, node: &Node, budget: &mut Budget) -> Eval<Vec<Item<'a>>> {
    match node {
        Node::List(nodes) => eval_list(input, nodes, budget),
        Node::Text(text) => Ok(vec![Item::Text(text.clone())]),
        Node::Field(name) => Ok(input
            .iter()
            .filter_map(|item| match item {
                Item::Data(Value::Object(map)) => map.get(name).map(Item::Data),
                _ => None,
            })
            .collect()),
        Node::Array(params) => eval_array(input, *params),
        Node::Filter {
            left,
            right,
            operator,
        } => eval_filter(input, left, right, operator, budget),
        Node::Int(i) => Ok(input.iter().map(|_| Item::Int(*i)).collect()),
        Node::Float(f) => Ok(input.iter().map(|_| Item::Float(*f)).collect()),
        Node::Bool(b) => Ok(input.iter().map(|_| Item::Bool(*b)).collect()),
        Node::Wildcard => Ok(input
            .iter()
            .filter(|i| !is_nil(i))
            .flat_map(children)
            .collect()),
        Node::Recursive => {
            let mut out = Vec::new();
            recursive(&input, &mut out, budget)?;
            Ok(out)
        }
        Node::Union(parts) => {
            let mut out = Vec::new();
            for part in parts {
                budget.spend(input.len())?;
                out.extend(eval_list(input.clone(), part, budget)?);
            }
            Ok(out)
        }
        Node::Identifier(name) => err(format!("unrecognized identifier {name}")),
    }
}

/// Every container at or below the items of `input`, depth first, into
/// `out`. As deep as the object, which its JSON parser bounds.
fn recursive<'a>(input: &[Item<'a>], out: &mut Vec<Item<'a>>, budget: &mut Budget) -> Eval<()> {
    for item in input.iter().filter(|i| !is_nil(i)) {
        let below = children(item);
        if !below.is_empty() {
            budget.spend(1 + below.len())?;
            out.push(item.clone());
            recursive(&below, out, budget)?;
        }
    }
    Ok(())
}

fn eval_array<'a>(input: Vec<Item<'a>>, node: [Param; 3]) -> Eval<Vec<Item<'a>>> {
    let mut result = Vec::new();
    for item in input.iter().filter(|i| !is_nil(i)) {
        let Item::Data(Value::Array(items)) = item else {
            return err("not array or slice");
        };
        let len = items.len() as i64;
        let mut params = node;
        if !params[0].known {
            params[0].value = 0;
        }
        if params[0].value < 0 {
            params[0].value += len;
        }
        if !params[1].known {
            params[1].value = len;
        }
        if params[1].value < 0 || (params[1].value == 0 && params[1].derived) {
            params[1].value += len;
        }
        let (start, end) = (params[0].value, params[1].value);
        if start == end {
            // Asking for no elements ends the evaluation with what it has.
            return Ok(result);
        }
        if start >= len || start < 0 {
            return err(format!(
                "array index out of bounds: index {start}, length {len}"
            ));
        }
        if end > len || end < 0 {
            return err(format!(
                "array index out of bounds: index {}, length {len}",
                end - 1
            ));
        }
        if start > end {
            return err(format!(
                "starting index {start} is greater than ending index {end}"
            ));
        }
        let step = if params[2].known {
            if params[2].value <= 0 {
                return err("step must be > 0");
            }
            params[2].value as usize
        } else {
            1
        };
        result.extend(
            items[start as usize..end as usize]
                .iter()
                .step_by(step)
                .map(Item::Data),
        );
    }
    Ok(result)
}

fn eval_filter<'a>(
    input: Vec<Item<'a>>,
    left: &[Node],
    right: &[Node],
    operator: &str,
    budget: &mut Budget,
) -> Eval<Vec<Item<'a>>> {
    let mut results = Vec::new();
    for item in &input {
        let Item::Data(Value::Array(items)) = item else {
            return err("not array or slice and cannot be filtered");
        };
        for element in items {
            budget.spend(1)?;
            let temp = vec![Item::Data(element)];
            let lefts = eval_list(temp.clone(), left, budget);
            if operator == "exists" {
                match lefts {
                    Ok(found) if !found.is_empty() => results.push(Item::Data(element)),
                    Err(EvalError::TooMany) => return Err(EvalError::TooMany),
                    _ => {}
                }
                continue;
            }
            let lefts = lefts?;
            let lhs = match lefts.as_slice() {
                [] => continue,
                [one] => one.clone(),
                _ => return err("can only compare one element at a time"),
            };
            let rights = eval_list(temp, right, budget)?;
            let rhs = match rights.as_slice() {
                [] => continue,
                [one] => one.clone(),
                _ => return err("can only compare one element at a time"),
            };
            let pass = match operator {
                "<" => less(&lhs, &rhs)?,
                ">" => !(less(&lhs, &rhs)? || equal(&lhs, &rhs)?),
                "==" => equal(&lhs, &rhs)?,
                "!=" => !equal(&lhs, &rhs)?,
                "<=" => less(&lhs, &rhs)? || equal(&lhs, &rhs)?,
                ">=" => !less(&lhs, &rhs)?,
                _ => return err(format!("unrecognized filter operator {operator}")),
            };
            if pass {
                results.push(Item::Data(element));
            }
        }
    }
    Ok(results)
}

/// `text/template`'s basic kinds of a compared value.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Basic<'a> {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(&'a str),
}

fn basic<'a>(item: &'a Item<'_>) -> Eval<Basic<'a>> {
    Ok(match item {
        Item::Data(Value::Bool(b)) | Item::Bool(b) => Basic::Bool(*b),
        Item::Data(Value::Number(n)) => match Number::of(n) {
            Number::Int(i) => Basic::Int(i),
            Number::Float(f) => Basic::Float(f),
        },
        Item::Data(Value::String(s)) => Basic::Str(s),
        Item::Text(s) => Basic::Str(s),
        Item::Int(i) => Basic::Int(*i),
        Item::Float(f) => Basic::Float(*f),
        Item::Byte(b) => Basic::Uint(u64::from(*b)),
        Item::Data(_) => return err("invalid type for comparison"),
    })
}

/// `template.Equal` of two values.
fn equal(a: &Item<'_>, b: &Item<'_>) -> Eval<bool> {
    Ok(match (basic(a)?, basic(b)?) {
        (Basic::Bool(x), Basic::Bool(y)) => x == y,
        (Basic::Int(x), Basic::Int(y)) => x == y,
        (Basic::Uint(x), Basic::Uint(y)) => x == y,
        (Basic::Float(x), Basic::Float(y)) => x == y,
        (Basic::Str(x), Basic::Str(y)) => x == y,
        (Basic::Int(x), Basic::Uint(y)) | (Basic::Uint(y), Basic::Int(x)) => {
            x >= 0 && x as u64 == y
        }
        _ => return err("incompatible types for comparison"),
    })
}

/// `template.Less` of two values.
fn less(a: &Item<'_>, b: &Item<'_>) -> Eval<bool> {
    Ok(match (basic(a)?, basic(b)?) {
        (Basic::Int(x), Basic::Int(y)) => x < y,
        (Basic::Uint(x), Basic::Uint(y)) => x < y,
        (Basic::Float(x), Basic::Float(y)) => x < y,
        (Basic::Str(x), Basic::Str(y)) => x < y,
        (Basic::Int(x), Basic::Uint(y)) => x < 0 || (x as u64) < y,
        (Basic::Uint(x), Basic::Int(y)) => y >= 0 && x < y as u64,
        (Basic::Bool(_), Basic::Bool(_)) => return err("invalid type for comparison"),
        _ => return err("incompatible types for comparison"),
    })
}

/// `PrintResults` of one result: maps and lists as JSON, a JSON null as
/// "<no value>", anything else as Go's `fmt.Print` prints it.
pub(crate) fn print(item: &Item<'_>) -> String {
    let mut out = String::new();
    match item {
        Item::Data(Value::Null) => out.push_str("<no value>"),
        Item::Data(v @ (Value::Object(_) | Value::Array(_))) => write_value(&mut out, v),
        Item::Data(Value::String(s)) | Item::Text(s) => out.push_str(s),
        Item::Data(Value::Bool(b)) | Item::Bool(b) => {
            out.push_str(if *b { "true" } else { "false" })
        }
        Item::Data(Value::Number(n)) => match Number::of(n) {
            Number::Int(i) => out.push_str(&i.to_string()),
            Number::Float(f) => write_f64_print(&mut out, f),
        },
        Item::Int(i) => out.push_str(&i.to_string()),
        Item::Float(f) => write_f64_print(&mut out, *f),
        Item::Byte(b) => out.push_str(&b.to_string()),
    }
    out
}
