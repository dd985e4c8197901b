//! A tab's conversation as a tree: the path it shows ([`Tab::messages`], each message the parent
//! of the next; the system prompt stands outside the tree) and the other branches
//! ([`Tab::branches`]), each the rest of a path that once left the shown one at some message.
//! An edit or a regenerate moves the path's tail into a branch and grows a new one from the same
//! parent; switching versions swaps the tail with a branch. Message ids never change, so a
//! branch hanging from a message inside another branch comes back with it.

use super::tab::{Branch, Message, Role, Tab};

/// `id`'s ‹n/m› among the versions `v` (oldest first), when there is more than one.
fn place(v: &[u64], id: u64) -> Option<(usize, usize)> {
    let n = v.iter().position(|&x| x == id)?;
    (v.len() > 1).then_some((n + 1, v.len()))
}

/// Whether a message's turn can have versions: user messages (edits) and answers (regenerates).
fn versioned(role: Role) -> bool {
    matches!(role, Role::User | Role::Model)
}

impl Tab {
    /// The id of message `i`'s parent: the message before it on the path, the system prompt
    /// aside (0 at the start).
    pub fn parent_id(&self, i: usize) -> u64 {
        self.messages[..i.min(self.messages.len())]
            .iter()
            .rev()
            .find(|m| m.role != Role::System)
            .map_or(0, |m| m.id)
    }

    /// The ids of message `i`'s versions, oldest first: its own and the first message of every
    /// branch from the same parent that starts with the same role.
    pub fn versions(&self, i: usize) -> Vec<u64> {
        match self.messages.get(i) {
            Some(m) if versioned(m.role) => self.versions_from(self.parent_id(i), m),
            Some(m) => vec![m.id],
            None => Vec::new(),
        }
    }

    fn versions_from(&self, parent: u64, m: &Message) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .branches
            .iter()
            .filter(|b| b.parent == parent)
            .filter_map(|b| b.messages.first())
            .filter(|f| f.role == m.role)
            .map(|f| f.id)
            .collect();
        ids.push(m.id);
        ids.sort_unstable();
        ids
    }

    /// Moves messages `i..` off the path into a branch, so that a new version can grow there.
    pub fn fork_at(&mut self, i: usize) {
        if i >= self.messages.len() {
            return;
        }
        let parent = self.parent_id(i);
        let rest = self.messages.split_off(i);
        self.branches.push(Branch {
            parent,
            messages: rest,
        });
        self.selected = None;
        self.editing = None;
        self.touched(i);
        self.refresh_versions();
    }

    /// Shows the version whose first message is `target` in place of message `i`'s: the path
    /// from `i` on and that branch change places. False (nothing changed) when it is not one.
    pub fn switch_to(&mut self, i: usize, target: u64) -> bool {
        let Some(role) = self.messages.get(i).map(|m| m.role) else {
            return false;
        };
        let parent = self.parent_id(i);
        let Some(b) = self.branches.iter().position(|b| {
            b.parent == parent
                && b.messages
                    .first()
                    .is_some_and(|f| f.id == target && f.role == role)
        }) else {
            return false;
        };
        let branch = self.branches.remove(b);
        let rest = self.messages.split_off(i);
        self.branches.push(Branch {
            parent,
            messages: rest,
        });
        self.messages.extend(branch.messages);
        for k in i..=self.messages.len() {
            self.touched(k);
        }
        self.refresh_versions();
        true
    }

    /// Shows the version of message `i`'s turn `delta` places on (cycling); the version shown
    /// now and how many there are, or `None` when the turn has one version.
    pub fn cycle_version(&mut self, i: usize, delta: isize) -> Option<(usize, usize)> {
        let v = self.versions(i);
        if v.len() < 2 {
            return None;
        }
        let (n, _) = place(&v, self.messages[i].id)?;
        let next = (n as isize - 1 + delta).rem_euclid(v.len() as isize) as usize;
        self.switch_to(i, v[next]).then_some((next + 1, v.len()))
    }

    /// Message `i`'s ‹n/m›, when its turn has more than one version.
    pub fn version_of(&self, i: usize) -> Option<(usize, usize)> {
        place(&self.versions(i), self.messages.get(i)?.id)
    }

    /// Gives each message of the path its ‹n/m›, marking the ones that changed.
    pub fn refresh_versions(&mut self) {
        let mut parent = 0;
        for i in 0..self.messages.len() {
            let m = &self.messages[i];
            let versions = versioned(m.role)
                .then(|| place(&self.versions_from(parent, m), m.id))
                .flatten();
            if m.role != Role::System {
                parent = m.id;
            }
            if self.messages[i].versions != versions {
                self.messages[i].versions = versions;
                self.touched(i);
            }
        }
    }

    /// Every message of the tree, the path first, then the branches.
    pub fn all_messages(&self) -> impl Iterator<Item = &Message> {
        self.messages
            .iter()
            .chain(self.branches.iter().flat_map(|b| &b.messages))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tab(texts: &[(Role, &str)]) -> Tab {
        let mut t = Tab::new(1, "t".into(), Default::default());
        for (role, text) in texts {
            t.push(Message::new(*role, *text));
        }
        t
    }

    fn texts(t: &Tab) -> Vec<&str> {
        t.messages.iter().map(|m| m.text.as_str()).collect()
    }

    #[test]
    fn edits_and_regenerates_grow_versions_that_switch_back_whole() {
        let mut t = tab(&[
            (Role::System, "be brief"),
            (Role::User, "a"),
            (Role::Model, "A"),
            (Role::User, "b"),
            (Role::Model, "B"),
        ]);
        // Edit "a": the tail goes into a branch, a new version grows from the start.
        t.fork_at(1);
        t.push(Message::new(Role::User, "a2"));
        t.push(Message::new(Role::Model, "A2"));
        t.refresh_versions();
        assert_eq!(texts(&t), ["be brief", "a2", "A2"]);
        assert_eq!(t.messages[1].versions, Some((2, 2)));
        assert_eq!(t.messages[2].versions, None);
        // Regenerate "A2": another answer to the same message.
        t.fork_at(2);
        t.push(Message::new(Role::Model, "A3"));
        t.refresh_versions();
        assert_eq!(t.messages[2].versions, Some((2, 2)));
        // Back to the first version of the first message: its whole path returns.
        assert_eq!(t.cycle_version(1, -1), Some((1, 2)));
        assert_eq!(texts(&t), ["be brief", "a", "A", "b", "B"]);
        assert_eq!(t.messages[1].versions, Some((1, 2)));
        // And forward again: the path last shown there, with its regenerated answer.
        assert_eq!(t.cycle_version(1, 1), Some((2, 2)));
        assert_eq!(texts(&t), ["be brief", "a2", "A3"]);
        assert_eq!(t.cycle_version(2, 1), Some((1, 2)));
        assert_eq!(texts(&t), ["be brief", "a2", "A2"]);
        // Nothing is lost: 3 on the path, 4 in the first version's branch, 1 in A3's.
        assert_eq!(t.all_messages().count(), 8);
        // A turn with one version does not cycle; notices have none.
        assert_eq!(t.cycle_version(0, 1), None);
        assert_eq!(t.parent_id(1), 0, "the system prompt is outside the tree");
    }

    #[test]
    fn a_message_from_another_role_is_not_a_version() {
        let mut t = tab(&[(Role::User, "a"), (Role::Model, "A")]);
        t.fork_at(1);
        t.push(Message::new(Role::Error, "failed"));
        t.refresh_versions();
        assert_eq!(t.versions(1).len(), 1);
        assert!(!t.switch_to(1, 2), "an answer is not a version of an error");
    }
}
