//! Import cycles: the strongly connected components of more than one
//! module (Tarjan's algorithm), each with one shortest ring through it to
//! show where to cut.

use std::collections::{BTreeMap, VecDeque};

use crate::imports::Imports;

/// A set of modules each of which imports, directly or round a ring, from
/// every other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    /// Its modules, ascending.
    pub modules: Vec<usize>,
    /// A shortest ring through its first module: each module imports from
    /// the next, and the last from the first.
    pub ring: Vec<usize>,
}

/// Every cycle among `imports`.
pub fn cycles(imports: &Imports) -> Vec<Cycle> {
    let mut tarjan = Tarjan {
        imports,
        index: vec![None; imports.len()],
        low: vec![0; imports.len()],
        stack: Vec::new(),
        on_stack: vec![false; imports.len()],
        next: 0,
        components: Vec::new(),
    };
    for module in 0..imports.len() {
        if tarjan.index[module].is_none() {
            tarjan.visit(module);
        }
    }
    let mut cycles: Vec<Cycle> = tarjan
        .components
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|mut modules| {
            modules.sort_unstable();
            let ring = ring(imports, &modules);
            Cycle { modules, ring }
        })
        .collect();
    cycles.sort_by(|a, b| a.modules.cmp(&b.modules));
    cycles
}

struct Tarjan<'i> {
    imports: &'i Imports,
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    stack: Vec<usize>,
    on_stack: Vec<bool>,
    next: usize,
    components: Vec<Vec<usize>>,
}

impl Tarjan<'_> {
    // Recursive: a crate's modules nest a few levels deep and number in
    // the tens, far from any stack's limit.
    fn visit(&mut self, v: usize) {
        self.index[v] = Some(self.next);
        self.low[v] = self.next;
        self.next += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
        for &w in self.imports[v].keys() {
            match self.index[w] {
                None => {
                    self.visit(w);
                    self.low[v] = self.low[v].min(self.low[w]);
                }
                Some(index) if self.on_stack[w] => self.low[v] = self.low[v].min(index),
                Some(_) => {}
            }
        }
        if Some(self.low[v]) == self.index[v] {
            let mut component = Vec::new();
            loop {
                let w = self.stack.pop().expect("v is on the stack");
                self.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            self.components.push(component);
        }
    }
}

/// A shortest ring from the component's first module back to it, within
/// the component (breadth first).
fn ring(imports: &Imports, component: &[usize]) -> Vec<usize> {
    let start = component[0];
    let mut came_from: BTreeMap<usize, usize> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for &w in imports[v].keys() {
            if component.binary_search(&w).is_err() {
                continue;
            }
            if w == start {
                let mut ring = vec![v];
                while let Some(&before) = came_from.get(ring.last().expect("not empty")) {
                    ring.push(before);
                }
                ring.reverse();
                return ring;
            }
            if w != start && !came_from.contains_key(&w) {
                came_from.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    unreachable!("a strongly connected component has a ring through each of its modules")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(usize, usize)], modules: usize) -> Imports {
        let mut imports: Imports = vec![BTreeMap::new(); modules];
        for (from, to) in edges {
            imports[*from].insert(*to, String::new());
        }
        imports
    }

    #[test]
    fn imports_that_run_one_way_have_no_cycle() {
        let imports = graph(&[(0, 1), (0, 2), (1, 2), (2, 3), (1, 3)], 4);
        assert_eq!(cycles(&imports), []);
    }

    #[test]
    fn two_modules_importing_from_each_other_are_a_cycle() {
        let imports = graph(&[(0, 1), (1, 2), (2, 1)], 3);
        assert_eq!(
            cycles(&imports),
            [Cycle {
                modules: vec![1, 2],
                ring: vec![1, 2]
            }]
        );
    }

    #[test]
    fn a_longer_ring_is_one_cycle_shown_by_its_shortest_ring() {
        // 1 -> 2 -> 3 -> 4 -> 1, and the shortcut 1 -> 4.
        let imports = graph(&[(0, 1), (1, 2), (2, 3), (3, 4), (4, 1), (1, 4)], 5);
        assert_eq!(
            cycles(&imports),
            [Cycle {
                modules: vec![1, 2, 3, 4],
                ring: vec![1, 4]
            }]
        );
    }

    #[test]
    fn separate_cycles_are_reported_separately() {
        let imports = graph(&[(0, 1), (1, 0), (2, 3), (3, 2), (1, 2)], 4);
        let found = cycles(&imports);
        assert_eq!(
            found.iter().map(|c| c.modules.clone()).collect::<Vec<_>>(),
            [vec![0, 1], vec![2, 3]]
        );
    }
}
