//! The one cursor over untrusted bytes of gpack's own binary structures
//! (the payload tables, GBT1 tokenizers): fixed records read in place by
//! `zerocopy`, variable parts by length, every step bounds-checked and
//! overflow-checked. Its [`CursorError`] says what was being read and
//! where; each format maps it into its own error type.

use zerocopy::{FromBytes, Immutable, KnownLayout, Unaligned};

/// Why a cursor step failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorError {
    /// Fewer bytes remain than the field or record needs.
    Short {
        /// The field or record.
        what: &'static str,
        /// Where it starts.
        offset: u64,
        /// Bytes it needs.
        need: u64,
        /// Bytes left.
        remain: u64,
    },
    /// `count` records of `record` bytes overflow the address space.
    Count {
        /// Which count.
        what: &'static str,
        /// Its value.
        count: u64,
        /// Bytes per record.
        record: u64,
        /// Bytes left.
        remain: u64,
    },
    /// A region that must start at `at` would start behind the cursor
    /// (regions come in file order).
    Behind {
        /// The region.
        what: &'static str,
        /// Where it should start.
        at: u64,
        /// Where the cursor is.
        pos: u64,
    },
    /// Bytes follow what must end the input.
    Trailing {
        /// What should have ended it.
        after: &'static str,
        /// How many bytes follow.
        count: u64,
    },
}

/// A position in a byte slice; see the module docs.
#[derive(Debug, Clone)]
pub struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `b`.
    pub fn new(b: &'a [u8]) -> Self {
        Cursor { b, pos: 0 }
    }

    /// The whole input, from its start.
    pub fn bytes(&self) -> &'a [u8] {
        self.b
    }

    /// Bytes read so far.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub fn remain(&self) -> usize {
        self.b.len() - self.pos
    }

    fn short(&self, what: &'static str, need: usize) -> CursorError {
        CursorError::Short {
            what,
            offset: self.pos as u64,
            need: need as u64,
            remain: self.remain() as u64,
        }
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], CursorError> {
        if n > self.remain() {
            return Err(self.short(what, n));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// One fixed record.
    pub fn record<T: FromBytes + KnownLayout + Immutable + Unaligned>(
        &mut self,
        what: &'static str,
    ) -> Result<&'a T, CursorError> {
        let bytes = self.take(size_of::<T>(), what)?;
        T::ref_from_bytes(bytes).map_err(|_| self.short(what, size_of::<T>()))
    }

    /// `n` fixed records in a row.
    pub fn records<T: FromBytes + KnownLayout + Immutable + Unaligned>(
        &mut self,
        n: usize,
        what: &'static str,
    ) -> Result<&'a [T], CursorError> {
        let need = n.checked_mul(size_of::<T>()).ok_or(CursorError::Count {
            what,
            count: n as u64,
            record: size_of::<T>() as u64,
            remain: self.remain() as u64,
        })?;
        let bytes = self.take(need, what)?;
        <[T]>::ref_from_bytes_with_elems(bytes, n).map_err(|_| self.short(what, need))
    }

    /// Skips the padding up to `at`, where the region `what` starts.
    pub fn skip_to(&mut self, at: usize, what: &'static str) -> Result<(), CursorError> {
        let n = at.checked_sub(self.pos).ok_or(CursorError::Behind {
            what,
            at: at as u64,
            pos: self.pos as u64,
        })?;
        self.take(n, what).map(|_| ())
    }

    /// The end of the input, which must be here.
    pub fn end(&self, after: &'static str) -> Result<(), CursorError> {
        match self.remain() {
            0 => Ok(()),
            n => Err(CursorError::Trailing {
                after,
                count: n as u64,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::little_endian::U32;

    #[test]
    fn every_step_is_bounded_and_says_where() {
        let b = [1u8, 0, 0, 0, 2, 0, 0, 0, 9];
        let mut c = Cursor::new(&b);
        assert_eq!(c.record::<U32>("first").unwrap().get(), 1);
        assert_eq!(
            c.records::<U32>(2, "pair"),
            Err(CursorError::Short {
                what: "pair",
                offset: 4,
                need: 8,
                remain: 5
            })
        );
        assert_eq!(
            c.records::<U32>(usize::MAX, "huge"),
            Err(CursorError::Count {
                what: "huge",
                count: usize::MAX as u64,
                record: 4,
                remain: 5
            })
        );
        assert_eq!(
            c.skip_to(2, "back"),
            Err(CursorError::Behind {
                what: "back",
                at: 2,
                pos: 4
            })
        );
        assert_eq!(c.records::<U32>(1, "second").unwrap()[0].get(), 2);
        assert_eq!(
            c.end("the table"),
            Err(CursorError::Trailing {
                after: "the table",
                count: 1
            })
        );
        c.skip_to(9, "tail").unwrap();
        assert_eq!(c.end("the table"), Ok(()));
        assert_eq!((c.pos(), c.remain()), (9, 0));
    }
}
