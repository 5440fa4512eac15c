//! `Revision`: a count of the changes made to one structure, so a check that reads only that
//! structure can tell there is nothing new to look at. The gateway's per-step invariants walk
//! the reply path's records; at fleet scale a full walk on every step cost more than the
//! step's own work, so the walks run again only once what they read has changed.

/// How many times a structure has changed. Every `&mut` method of its owner bumps it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Revision(u64);

impl Revision {
    pub fn bump(&mut self) {
        self.0 = self.0.wrapping_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bump_is_a_new_revision() {
        let (mut a, b) = (Revision::default(), Revision::default());
        assert_eq!(a, b);
        a.bump();
        assert_ne!(a, b);
    }
}
