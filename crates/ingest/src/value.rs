//! GGUF metadata values and the ordered key/value store.
//!
//! GGUF strings are length-prefixed bytes that the format does not promise to be
//! UTF-8 (tokenizer vocabularies in the wild contain invalid sequences), so
//! [`GgufString`] keeps the raw bytes and only offers `&str` when they are valid.
//! Arrays are typed vectors rather than `Vec<Value>`: a 150k-entry token-type array
//! is one allocation, and [`Metadata::get_i32_array`] can hand out a slice.
//! [`Metadata`] keeps file order, so writing a parsed GGUF back reproduces it.

use std::collections::HashMap;

/// A GGUF string: raw bytes, usually but not necessarily UTF-8.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct GgufString(Vec<u8>);

impl GgufString {
    /// Wraps raw bytes.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }

    /// The text, when the bytes are valid UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Takes the raw bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    /// Byte length.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the string is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for GgufString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.as_str() {
            Some(s) => std::fmt::Debug::fmt(s, f),
            None => write!(f, "b{:?}", String::from_utf8_lossy(&self.0)),
        }
    }
}

impl From<&str> for GgufString {
    fn from(s: &str) -> Self {
        Self(s.as_bytes().to_vec())
    }
}

impl From<String> for GgufString {
    fn from(s: String) -> Self {
        Self(s.into_bytes())
    }
}

/// A GGUF metadata value type, with its on-disk id (`gguf_type` in gguf.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    /// The type with this id.
    pub fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The on-disk id.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The gguf-py style name (`"UINT32"`, `"STRING"`, …).
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "UINT8",
            I8 => "INT8",
            U16 => "UINT16",
            I16 => "INT16",
            U32 => "UINT32",
            I32 => "INT32",
            F32 => "FLOAT32",
            Bool => "BOOL",
            String => "STRING",
            Array => "ARRAY",
            U64 => "UINT64",
            I64 => "INT64",
            F64 => "FLOAT64",
        }
    }

    /// The smallest number of bytes one value of this type takes on disk
    /// (used to bound array lengths before allocating).
    pub fn min_size(self) -> u64 {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 => 8,
            // u64 length prefix
            String => 8,
            // u32 element type + u64 length
            Array => 12,
        }
    }
}

/// A GGUF metadata value.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(GgufString),
    Array(Array),
}

/// A GGUF array: one element type, any length. Arrays of arrays may mix inner types.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    String(Vec<GgufString>),
    Array(Vec<Array>),
}

impl Array {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::F64(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element type.
    pub fn element_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F32(_) => ValueType::F32,
            Array::F64(_) => ValueType::F64,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
        }
    }
}

impl Value {
    /// The value's type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F32(_) => ValueType::F32,
            Value::F64(_) => ValueType::F64,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
        }
    }

    /// Any integer value that is non-negative and fits in `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer value that fits in `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => i64::try_from(v).ok(),
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v),
            _ => None,
        }
    }

    /// The text of a UTF-8 string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => s.as_str(),
            _ => None,
        }
    }

    /// The array, for an array value.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// Ordered GGUF metadata: `(key, value)` pairs in file order, with a key index.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// `(key, value)` pairs in insertion (file) order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    /// Sets `key`: replaces the value in place if present (keeping its position),
    /// appends otherwise. Returns the old value.
    pub fn insert(&mut self, key: impl Into<String>, value: Value) -> Option<Value> {
        let key = key.into();
        match self.index.get(&key) {
            Some(&i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            None => {
                self.index.insert(key.clone(), self.entries.len());
                self.entries.push((key, value));
                None
            }
        }
    }

    /// Removes `key`, keeping the order of the others.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let i = self.index.remove(key)?;
        let (_, v) = self.entries.remove(i);
        for (_, j) in self.index.iter_mut() {
            if *j > i {
                *j -= 1;
            }
        }
        Some(v)
    }

    /// A UTF-8 string value.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    /// A string value as raw bytes.
    pub fn get_string(&self, key: &str) -> Option<&GgufString> {
        match self.get(key)? {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// Any integer value that fits in `u32` (GGUF writers differ in the integer
    /// type they use for counts, e.g. `split.count` is u16).
    pub fn get_u32(&self, key: &str) -> Option<u32> {
        u32::try_from(self.get(key)?.as_u64()?).ok()
    }

    /// Any integer value that fits in `u64`.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }

    /// Any integer value that fits in `i64`.
    pub fn get_i64(&self, key: &str) -> Option<i64> {
        self.get(key)?.as_i64()
    }

    /// An `F32` value (or an `F64` one, rounded).
    pub fn get_f32(&self, key: &str) -> Option<f32> {
        match *self.get(key)? {
            Value::F32(v) => Some(v),
            Value::F64(v) => Some(v as f32),
            _ => None,
        }
    }

    /// A `Bool` value.
    pub fn get_bool(&self, key: &str) -> Option<bool> {
        match *self.get(key)? {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// An array value of any element type.
    pub fn get_array(&self, key: &str) -> Option<&Array> {
        self.get(key)?.as_array()
    }

    /// An array of strings.
    pub fn get_string_array(&self, key: &str) -> Option<&[GgufString]> {
        match self.get_array(key)? {
            Array::String(v) => Some(v),
            _ => None,
        }
    }

    /// An array of `i32`.
    pub fn get_i32_array(&self, key: &str) -> Option<&[i32]> {
        match self.get_array(key)? {
            Array::I32(v) => Some(v),
            _ => None,
        }
    }

    /// An array of `u32`.
    pub fn get_u32_array(&self, key: &str) -> Option<&[u32]> {
        match self.get_array(key)? {
            Array::U32(v) => Some(v),
            _ => None,
        }
    }

    /// An array of `f32`.
    pub fn get_f32_array(&self, key: &str) -> Option<&[f32]> {
        match self.get_array(key)? {
            Array::F32(v) => Some(v),
            _ => None,
        }
    }

    /// An array of `u8`.
    pub fn get_u8_array(&self, key: &str) -> Option<&[u8]> {
        match self.get_array(key)? {
            Array::U8(v) => Some(v),
            _ => None,
        }
    }
}

impl FromIterator<(String, Value)> for Metadata {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
        let mut m = Metadata::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_replaces_in_place_and_remove_reindexes() {
        let mut m = Metadata::new();
        m.insert("a", Value::U32(1));
        m.insert("b", Value::U16(2));
        m.insert("c", Value::String("x".into()));
        assert_eq!(m.insert("a", Value::U32(7)), Some(Value::U32(1)));
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(m.remove("b"), Some(Value::U16(2)));
        assert_eq!(m.get_str("c"), Some("x"));
        assert_eq!(m.get_u32("a"), Some(7));
        assert_eq!(m.get_u32("b"), None);
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "c"]);
    }

    #[test]
    fn lenient_integer_getters() {
        let mut m = Metadata::new();
        m.insert("neg", Value::I32(-1));
        m.insert("big", Value::U64(1 << 40));
        m.insert("small", Value::I16(5));
        assert_eq!(m.get_u32("neg"), None);
        assert_eq!(m.get_i64("neg"), Some(-1));
        assert_eq!(m.get_u32("big"), None);
        assert_eq!(m.get_u64("big"), Some(1 << 40));
        assert_eq!(m.get_u32("small"), Some(5));
    }

    #[test]
    fn non_utf8_string_keeps_bytes() {
        let s = GgufString::from_bytes(vec![0xff, b'a']);
        assert_eq!(s.as_str(), None);
        assert_eq!(s.as_bytes(), &[0xff, b'a']);
        assert!(format!("{s:?}").starts_with('b'));
    }
}
