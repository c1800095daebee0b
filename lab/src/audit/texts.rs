//! The text the audit keeps for every create (its key, the effect its reply names, its place
//! and the excerpts the report shows), held in a few large blocks: a box per text cost an
//! allocation's overhead each, and one growing buffer the slack of its doubling. A recording of
//! a million creates keeps a million of each.

/// How much text one block holds (a longer text gets a block of its own).
const BLOCK: usize = 1 << 20;

/// Every kept text, block after block; a block is never grown, so a [`Text`] stays valid.
#[derive(Default)]
pub struct Texts {
    blocks: Vec<String>,
}

/// One kept text: where it is in [`Texts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Text {
    block: u32,
    at: u32,
    len: u32,
}

impl Texts {
    /// Keeps `text` and returns where it is.
    pub fn add(&mut self, text: &str) -> Text {
        let fits = self
            .blocks
            .last()
            .is_some_and(|b| b.capacity() - b.len() >= text.len());
        if !fits {
            self.blocks
                .push(String::with_capacity(BLOCK.max(text.len())));
        }
        let block = self.blocks.len() - 1;
        let kept = &mut self.blocks[block];
        let at = kept.len();
        kept.push_str(text);
        let small = |n: usize| u32::try_from(n).expect("a block is smaller than 4 GiB");
        Text {
            block: small(block),
            at: small(at),
            len: small(text.len()),
        }
    }

    /// The text kept at `text`.
    pub fn get(&self, text: Text) -> &str {
        let at = text.at as usize;
        &self.blocks[text.block as usize][at..at + text.len as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_text_reads_back_as_it_was_kept_across_blocks() {
        let mut texts = Texts::default();
        let long = "é".repeat(BLOCK);
        let kept: Vec<(String, Text)> = (0..3000)
            .map(|n| {
                let text = if n == 1500 {
                    long.clone()
                } else {
                    format!("op-{n:0400}")
                };
                let at = texts.add(&text);
                (text, at)
            })
            .collect();
        assert!(
            texts.blocks.len() > 2,
            "the texts filled more than one block"
        );
        for (text, at) in &kept {
            assert_eq!(texts.get(*at), text);
        }
        let empty = texts.add("");
        assert_eq!(texts.get(empty), "");
    }
}
