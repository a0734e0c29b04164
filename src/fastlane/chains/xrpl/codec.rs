//! The XRPL binary format of a Payment transaction, strictly: fields in canonical order with
//! no duplicates, minimal field headers and length prefixes, no trailing bytes. Fields whose
//! type is understood but which a plain Payment never needs are decoded and kept, so the
//! caller can refuse them by name after the checks that come first.

use std::fmt;

/// Serialized type codes this codec can walk.
pub mod type_code {
    pub const UINT16: u8 = 1;
    pub const UINT32: u8 = 2;
    pub const UINT64: u8 = 3;
    pub const HASH128: u8 = 4;
    pub const HASH256: u8 = 5;
    pub const AMOUNT: u8 = 6;
    pub const BLOB: u8 = 7;
    pub const ACCOUNT: u8 = 8;
    pub const OBJECT: u8 = 14;
    pub const ARRAY: u8 = 15;
    pub const UINT8: u8 = 16;
    pub const HASH160: u8 = 17;
    pub const PATHSET: u8 = 18;
    pub const VECTOR256: u8 = 19;
}

/// A field's identity: its serialized type and its number within that type. Canonical order
/// is ascending by (type, number), which is the derived order here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldId {
    pub type_code: u8,
    pub field_code: u8,
}

impl FieldId {
    pub const fn new(type_code: u8, field_code: u8) -> FieldId {
        FieldId {
            type_code,
            field_code,
        }
    }
}

/// The fields a Payment may carry that the checks read or refuse by name.
pub mod field {
    use super::{FieldId, type_code as t};

    pub const TRANSACTION_TYPE: FieldId = FieldId::new(t::UINT16, 2);
    pub const NETWORK_ID: FieldId = FieldId::new(t::UINT32, 1);
    pub const FLAGS: FieldId = FieldId::new(t::UINT32, 2);
    pub const SOURCE_TAG: FieldId = FieldId::new(t::UINT32, 3);
    pub const SEQUENCE: FieldId = FieldId::new(t::UINT32, 4);
    pub const DESTINATION_TAG: FieldId = FieldId::new(t::UINT32, 14);
    pub const LAST_LEDGER_SEQUENCE: FieldId = FieldId::new(t::UINT32, 27);
    pub const TICKET_SEQUENCE: FieldId = FieldId::new(t::UINT32, 41);
    pub const INVOICE_ID: FieldId = FieldId::new(t::HASH256, 17);
    pub const AMOUNT: FieldId = FieldId::new(t::AMOUNT, 1);
    pub const FEE: FieldId = FieldId::new(t::AMOUNT, 8);
    pub const SEND_MAX: FieldId = FieldId::new(t::AMOUNT, 9);
    pub const DELIVER_MIN: FieldId = FieldId::new(t::AMOUNT, 10);
    pub const SIGNING_PUB_KEY: FieldId = FieldId::new(t::BLOB, 3);
    pub const TXN_SIGNATURE: FieldId = FieldId::new(t::BLOB, 4);
    pub const ACCOUNT: FieldId = FieldId::new(t::ACCOUNT, 1);
    pub const DESTINATION: FieldId = FieldId::new(t::ACCOUNT, 3);
    pub const DELEGATE: FieldId = FieldId::new(t::ACCOUNT, 12);
    pub const SIGNERS: FieldId = FieldId::new(t::ARRAY, 3);
    pub const MEMOS: FieldId = FieldId::new(t::ARRAY, 9);
    pub const PATHS: FieldId = FieldId::new(t::PATHSET, 1);

    /// Every field a Payment is checked on; anything else is unsupported.
    pub const PAYMENT_FIELDS: [FieldId; 21] = [
        TRANSACTION_TYPE,
        NETWORK_ID,
        FLAGS,
        SOURCE_TAG,
        SEQUENCE,
        DESTINATION_TAG,
        LAST_LEDGER_SEQUENCE,
        TICKET_SEQUENCE,
        INVOICE_ID,
        AMOUNT,
        FEE,
        SEND_MAX,
        DELIVER_MIN,
        SIGNING_PUB_KEY,
        TXN_SIGNATURE,
        ACCOUNT,
        DESTINATION,
        DELEGATE,
        SIGNERS,
        MEMOS,
        PATHS,
    ];

    /// Object and array terminators.
    pub const OBJECT_END: FieldId = FieldId::new(super::type_code::OBJECT, 1);
    pub const ARRAY_END: FieldId = FieldId::new(super::type_code::ARRAY, 1);
}

/// The Payment transaction type.
pub const PAYMENT_TYPE: u16 = 0;

/// Largest native amount the ledger can hold (100 billion XRP in drops).
const MAX_DROPS: u64 = 100_000_000_000_000_000;
/// Largest length a length prefix can express.
const MAX_VL: usize = 918_744;
/// Nesting bound for objects inside arrays inside objects, so hostile input cannot recurse deep.
const MAX_DEPTH: usize = 4;

/// Why bytes are not a canonical transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for DecodeError {}

/// An amount field's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    /// Drops of XRP.
    Native(u64),
    /// An issued-currency or MPT amount; never accepted as payment here.
    NonNative,
}

/// One field as it appears on the wire: its identity and the value bytes (without the length
/// prefix for variable-length types; with the terminators for objects and arrays).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub id: FieldId,
    pub value: Vec<u8>,
}

/// A decoded transaction: its fields in wire order (which is canonical order).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Transaction {
    pub fields: Vec<Field>,
}

impl Transaction {
    /// The raw value of `id`, if present.
    pub fn get(&self, id: FieldId) -> Option<&[u8]> {
        self.fields
            .binary_search_by(|f| f.id.cmp(&id))
            .ok()
            .and_then(|i| self.fields.get(i))
            .map(|f| f.value.as_slice())
    }

    pub fn has(&self, id: FieldId) -> bool {
        self.get(id).is_some()
    }

    pub fn u16(&self, id: FieldId) -> Option<u16> {
        self.get(id)
            .and_then(|v| <[u8; 2]>::try_from(v).ok())
            .map(u16::from_be_bytes)
    }

    pub fn u32(&self, id: FieldId) -> Option<u32> {
        self.get(id)
            .and_then(|v| <[u8; 4]>::try_from(v).ok())
            .map(u32::from_be_bytes)
    }

    pub fn account(&self, id: FieldId) -> Option<[u8; 20]> {
        self.get(id).and_then(|v| <[u8; 20]>::try_from(v).ok())
    }

    pub fn hash256(&self, id: FieldId) -> Option<[u8; 32]> {
        self.get(id).and_then(|v| <[u8; 32]>::try_from(v).ok())
    }

    pub fn amount(&self, id: FieldId) -> Option<Amount> {
        self.get(id).map(|v| match <[u8; 8]>::try_from(v) {
            Ok(bytes) => Amount::Native(u64::from_be_bytes(bytes) & DROPS_MASK),
            Err(_) => Amount::NonNative,
        })
    }

    /// Fields outside the Payment set, in wire order.
    pub fn unsupported_fields(&self) -> impl Iterator<Item = FieldId> + '_ {
        self.fields
            .iter()
            .map(|f| f.id)
            .filter(|id| !field::PAYMENT_FIELDS.contains(id))
    }

    /// Sets (or adds) a field, keeping canonical order.
    pub fn set(&mut self, id: FieldId, value: Vec<u8>) {
        match self.fields.binary_search_by(|f| f.id.cmp(&id)) {
            Ok(i) => {
                if let Some(f) = self.fields.get_mut(i) {
                    f.value = value;
                }
            }
            Err(i) => self.fields.insert(i, Field { id, value }),
        }
    }

    /// The full wire encoding.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_filtered(|_| true)
    }

    /// The encoding a single signer signs: every field but the signature and the multi-signers.
    pub fn encode_for_signing(&self) -> Vec<u8> {
        self.encode_filtered(|id| id != field::TXN_SIGNATURE && id != field::SIGNERS)
    }

    fn encode_filtered(&self, keep: impl Fn(FieldId) -> bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        for f in self.fields.iter().filter(|f| keep(f.id)) {
            write_header(&mut out, f.id);
            if is_variable_length(f.id.type_code) {
                write_vl(&mut out, f.value.len());
            }
            out.extend_from_slice(&f.value);
        }
        out
    }
}

/// Native amounts: bit 63 clear (not issued), bit 62 set (positive), bit 61 clear (not MPT).
const NATIVE_POSITIVE: u64 = 0x4000_0000_0000_0000;
const AMOUNT_KIND_MASK: u64 = 0xE000_0000_0000_0000;
const DROPS_MASK: u64 = 0x1FFF_FFFF_FFFF_FFFF;

/// The 8 bytes of a native amount.
pub fn native_amount(drops: u64) -> Vec<u8> {
    (NATIVE_POSITIVE | (drops & DROPS_MASK))
        .to_be_bytes()
        .to_vec()
}

fn is_variable_length(type_code: u8) -> bool {
    matches!(
        type_code,
        type_code::BLOB | type_code::ACCOUNT | type_code::VECTOR256
    )
}

fn write_header(out: &mut Vec<u8>, id: FieldId) {
    let (t, f) = (id.type_code, id.field_code);
    match (t < 16, f < 16) {
        (true, true) => out.push((t << 4) | f),
        (true, false) => out.extend_from_slice(&[t << 4, f]),
        (false, true) => out.extend_from_slice(&[f, t]),
        (false, false) => out.extend_from_slice(&[0, t, f]),
    }
}

fn write_vl(out: &mut Vec<u8>, len: usize) {
    if len <= 192 {
        out.push(len as u8);
    } else if len <= 12_480 {
        let n = len - 193;
        out.extend_from_slice(&[193 + (n >> 8) as u8, (n & 0xff) as u8]);
    } else {
        let n = len - 12_481;
        out.extend_from_slice(&[
            241 + (n >> 16) as u8,
            ((n >> 8) & 0xff) as u8,
            (n & 0xff) as u8,
        ]);
    }
}

/// A cursor over untrusted bytes; every read is bounds-checked.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn done(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or(DecodeError("truncated transaction"))?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or(DecodeError("truncated transaction"))?;
        let slice = self
            .bytes
            .get(self.pos..end)
            .ok_or(DecodeError("truncated transaction"))?;
        self.pos = end;
        Ok(slice)
    }

    fn header(&mut self) -> Result<FieldId, DecodeError> {
        let first = self.byte()?;
        let mut type_code = first >> 4;
        let mut field_code = first & 0x0f;
        // Extended codes must be needed: a code below 16 written long is not canonical.
        if type_code == 0 {
            type_code = self.byte()?;
            if type_code < 16 {
                return Err(DecodeError("non-canonical field header"));
            }
        }
        if field_code == 0 {
            field_code = self.byte()?;
            if field_code < 16 {
                return Err(DecodeError("non-canonical field header"));
            }
        }
        Ok(FieldId::new(type_code, field_code))
    }

    fn vl(&mut self) -> Result<usize, DecodeError> {
        let b0 = usize::from(self.byte()?);
        let len = match b0 {
            0..=192 => b0,
            193..=240 => 193 + (b0 - 193) * 256 + usize::from(self.byte()?),
            241..=254 => {
                let b1 = usize::from(self.byte()?);
                let b2 = usize::from(self.byte()?);
                12_481 + (b0 - 241) * 65_536 + b1 * 256 + b2
            }
            _ => return Err(DecodeError("invalid length prefix")),
        };
        if len > MAX_VL {
            return Err(DecodeError("invalid length prefix"));
        }
        Ok(len)
    }
}

/// Decodes a whole transaction; every byte must belong to a field.
pub fn decode(bytes: &[u8]) -> Result<Transaction, DecodeError> {
    let mut reader = Reader { bytes, pos: 0 };
    let mut fields: Vec<Field> = Vec::new();
    while !reader.done() {
        let id = reader.header()?;
        if id == field::OBJECT_END || id == field::ARRAY_END {
            return Err(DecodeError("unexpected end marker"));
        }
        if fields.last().is_some_and(|last| last.id >= id) {
            return Err(DecodeError("fields out of canonical order"));
        }
        let value = read_value(&mut reader, id, 0)?.to_vec();
        fields.push(Field { id, value });
    }
    Ok(Transaction { fields })
}

/// Reads one value of `id`'s type; returns its bytes (without a length prefix).
fn read_value<'a>(
    reader: &mut Reader<'a>,
    id: FieldId,
    depth: usize,
) -> Result<&'a [u8], DecodeError> {
    match id.type_code {
        type_code::UINT8 => reader.take(1),
        type_code::UINT16 => reader.take(2),
        type_code::UINT32 => reader.take(4),
        type_code::UINT64 => reader.take(8),
        type_code::HASH128 => reader.take(16),
        type_code::HASH160 => reader.take(20),
        type_code::HASH256 => reader.take(32),
        type_code::AMOUNT => read_amount(reader),
        type_code::BLOB => {
            let len = reader.vl()?;
            reader.take(len)
        }
        type_code::ACCOUNT => {
            let len = reader.vl()?;
            if len != 20 {
                return Err(DecodeError("account ID is not 20 bytes"));
            }
            reader.take(len)
        }
        type_code::VECTOR256 => {
            let len = reader.vl()?;
            if len % 32 != 0 {
                return Err(DecodeError("Vector256 length is not a multiple of 32"));
            }
            reader.take(len)
        }
        type_code::OBJECT => {
            let start = reader.pos;
            read_object_body(reader, depth + 1)?;
            Ok(reader.bytes.get(start..reader.pos).unwrap_or_default())
        }
        type_code::ARRAY => {
            let start = reader.pos;
            read_array_body(reader, depth + 1)?;
            Ok(reader.bytes.get(start..reader.pos).unwrap_or_default())
        }
        type_code::PATHSET => {
            let start = reader.pos;
            read_pathset(reader)?;
            Ok(reader.bytes.get(start..reader.pos).unwrap_or_default())
        }
        _ => Err(DecodeError("unknown field type")),
    }
}

fn read_amount<'a>(reader: &mut Reader<'a>) -> Result<&'a [u8], DecodeError> {
    let first = *reader
        .bytes
        .get(reader.pos)
        .ok_or(DecodeError("truncated transaction"))?;
    if first & 0x80 != 0 {
        // Issued currency: 8-byte value, 20-byte currency, 20-byte issuer.
        return reader.take(48);
    }
    if first & 0x20 != 0 {
        // MPT: flags byte, 8-byte value, 24-byte issuance ID.
        return reader.take(33);
    }
    let raw = reader.take(8)?;
    let value = <[u8; 8]>::try_from(raw)
        .map(u64::from_be_bytes)
        .map_err(|_| DecodeError("truncated transaction"))?;
    // Only the positive form is canonical (zero included); negative drops never appear in
    // a transaction.
    if value & AMOUNT_KIND_MASK != NATIVE_POSITIVE || value & DROPS_MASK > MAX_DROPS {
        return Err(DecodeError("non-canonical native amount"));
    }
    Ok(raw)
}

/// Fields until the object terminator, in canonical order.
fn read_object_body(reader: &mut Reader<'_>, depth: usize) -> Result<(), DecodeError> {
    if depth > MAX_DEPTH {
        return Err(DecodeError("nesting too deep"));
    }
    let mut last: Option<FieldId> = None;
    loop {
        let id = reader.header()?;
        if id == field::OBJECT_END {
            return Ok(());
        }
        if id == field::ARRAY_END {
            return Err(DecodeError("unexpected end marker"));
        }
        if last.is_some_and(|l| l >= id) {
            return Err(DecodeError("fields out of canonical order"));
        }
        last = Some(id);
        read_value(reader, id, depth)?;
    }
}

/// Objects (each a wrapper field header then a body) until the array terminator.
fn read_array_body(reader: &mut Reader<'_>, depth: usize) -> Result<(), DecodeError> {
    if depth > MAX_DEPTH {
        return Err(DecodeError("nesting too deep"));
    }
    loop {
        let id = reader.header()?;
        if id == field::ARRAY_END {
            return Ok(());
        }
        if id.type_code != type_code::OBJECT || id == field::OBJECT_END {
            return Err(DecodeError("array element is not an object"));
        }
        read_object_body(reader, depth + 1)?;
    }
}

/// Path steps: a type byte naming which of account, currency and issuer follow; 0xFF
/// separates paths and 0x00 ends the set.
fn read_pathset(reader: &mut Reader<'_>) -> Result<(), DecodeError> {
    let mut steps_in_path = 0usize;
    loop {
        let kind = reader.byte()?;
        match kind {
            0x00 | 0xFF => {
                if steps_in_path == 0 {
                    return Err(DecodeError("empty path"));
                }
                if kind == 0x00 {
                    return Ok(());
                }
                steps_in_path = 0;
            }
            _ => {
                if kind & !0x31 != 0 || kind == 0 {
                    return Err(DecodeError("invalid path step"));
                }
                for bit in [0x01u8, 0x10, 0x20] {
                    if kind & bit != 0 {
                        reader.take(20)?;
                    }
                }
                steps_in_path += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_bytes(id: FieldId) -> Vec<u8> {
        let mut out = Vec::new();
        write_header(&mut out, id);
        out
    }

    #[test]
    fn headers_round_trip_in_all_four_forms() {
        for id in [
            FieldId::new(1, 2),
            FieldId::new(2, 27),
            FieldId::new(16, 3),
            FieldId::new(18, 1),
            FieldId::new(17, 20),
        ] {
            let bytes = header_bytes(id);
            let mut reader = Reader {
                bytes: &bytes,
                pos: 0,
            };
            assert_eq!(reader.header(), Ok(id));
            assert!(reader.done());
        }
    }

    #[test]
    fn long_form_header_for_a_small_code_is_refused() {
        // Sequence (type 2, field 4) written with an extended field byte.
        let mut bytes = vec![0x20, 0x04];
        bytes.extend_from_slice(&[0, 0, 0, 5]);
        assert_eq!(
            decode(&bytes),
            Err(DecodeError("non-canonical field header"))
        );
    }

    #[test]
    fn length_prefixes_round_trip_at_every_boundary() {
        for len in [0, 1, 192, 193, 194, 12_480, 12_481, 12_482, MAX_VL] {
            let mut out = Vec::new();
            write_vl(&mut out, len);
            let mut reader = Reader {
                bytes: &out,
                pos: 0,
            };
            assert_eq!(reader.vl(), Ok(len), "length {len}");
            assert!(reader.done());
        }
        let mut reader = Reader {
            bytes: &[255],
            pos: 0,
        };
        assert!(reader.vl().is_err());
    }

    #[test]
    fn out_of_order_duplicate_and_trailing_bytes_are_refused() {
        let mut tx = Transaction::default();
        tx.set(field::SEQUENCE, vec![0, 0, 0, 5]);
        tx.set(field::TRANSACTION_TYPE, vec![0, 0]);
        let good = tx.encode();
        assert_eq!(decode(&good), Ok(tx.clone()));

        let seq_first = [&good[3..], &good[..3]].concat();
        assert_eq!(
            decode(&seq_first),
            Err(DecodeError("fields out of canonical order"))
        );
        let twice = [&good[..], &good[3..]].concat();
        assert_eq!(
            decode(&twice),
            Err(DecodeError("fields out of canonical order"))
        );
        let trailing = [&good[..], &[0x24][..]].concat();
        assert!(decode(&trailing).is_err());
    }

    #[test]
    fn native_amounts_must_be_positive_and_bounded() {
        let mut tx = Transaction::default();
        tx.set(field::AMOUNT, native_amount(100_000));
        let bytes = tx.encode();
        assert_eq!(
            decode(&bytes).map(|t| t.amount(field::AMOUNT)),
            Ok(Some(Amount::Native(100_000)))
        );
        let mut negative = bytes.clone();
        if let Some(b) = negative.get_mut(1) {
            *b &= !0x40;
        }
        assert!(decode(&negative).is_err());
        let mut too_big = Transaction::default();
        too_big.set(
            field::AMOUNT,
            (NATIVE_POSITIVE | (MAX_DROPS + 1)).to_be_bytes().to_vec(),
        );
        assert!(decode(&too_big.encode()).is_err());
    }

    #[test]
    fn arrays_objects_and_paths_are_walked_and_kept_verbatim() {
        // Memos: [ Memo { MemoData: ABCD } ]
        let memos = vec![0xEA, 0x7D, 0x02, 0xAB, 0xCD, 0xE1, 0xF1];
        let mut tx = Transaction::default();
        tx.set(field::MEMOS, memos.clone());
        let mut path = vec![0x01];
        path.extend_from_slice(&[7u8; 20]);
        path.push(0x00);
        tx.set(field::PATHS, path);
        let bytes = tx.encode();
        let decoded = decode(&bytes);
        assert_eq!(
            decoded.as_ref().map(|t| t.get(field::MEMOS)),
            Ok(Some(&memos[..]))
        );
        assert_eq!(decoded.map(|t| t.encode()), Ok(bytes));
        // An array element that is not an object.
        assert!(decode(&[0xF9, 0x24, 0, 0, 0, 1, 0xF1]).is_err());
        // Unterminated array.
        assert!(decode(&[0xF9, 0xEA, 0xE1]).is_err());
    }

    #[test]
    fn unknown_types_are_refused_and_unusual_known_fields_are_reported() {
        assert_eq!(
            decode(&[0x01, 0x63, 0]),
            Err(DecodeError("unknown field type"))
        );
        // AccountTxnID (Hash256 field 9) is well formed but not part of a plain Payment.
        let mut tx = Transaction::default();
        tx.set(FieldId::new(5, 9), vec![1; 32]);
        let decoded = decode(&tx.encode()).unwrap_or_default();
        assert_eq!(
            decoded.unsupported_fields().collect::<Vec<_>>(),
            vec![FieldId::new(5, 9)]
        );
    }
}
