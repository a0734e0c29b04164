//! The Solana wire format of legacy transactions, decoded strictly and encoded back.
//!
//! A transaction is a compact list of 64-byte signatures followed by the message: a three-byte
//! header, a compact list of 32-byte account keys, the recent blockhash, and a compact list of
//! compiled instructions. Compact lengths ("shortvec") are little-endian base-128 in one to
//! three bytes. The decoder accepts exactly one encoding of every transaction: a length must
//! use its shortest form and nothing may follow the last instruction, so encoding a decoded
//! transaction gives back the bytes it came from. Versioned messages (first message byte with
//! the high bit set) are refused: the fast lane accepts legacy transfers only.

/// Bytes in an ed25519 signature.
pub const SIGNATURE_LEN: usize = 64;
/// Bytes in an account key or a blockhash.
pub const KEY_LEN: usize = 32;

/// The largest value a compact length can carry.
const SHORT_VEC_MAX: usize = u16::MAX as usize;
/// The marker bit of a versioned message's first byte.
const VERSIONED_MESSAGE_BIT: u8 = 0x80;

/// Why bytes are not a legacy transaction in its one accepted encoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("ends early")]
    Truncated,
    #[error("a length is not in its shortest form")]
    LengthNotMinimal,
    #[error("a length does not fit 16 bits")]
    LengthTooLarge,
    #[error("the message is versioned; only legacy messages are accepted")]
    Versioned,
    #[error("{0} bytes follow the transaction")]
    TrailingBytes(usize),
}

/// The counts at the start of a message that say which keys sign and which are read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageHeader {
    /// The first this many keys sign, in the order of the signatures.
    pub required_signatures: u8,
    /// The last this many of the signing keys are read-only.
    pub readonly_signed: u8,
    /// The last this many of all keys are read-only (and do not sign).
    pub readonly_unsigned: u8,
}

/// One instruction, with its program and accounts named by their index in the key list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledInstruction {
    pub program_index: u8,
    pub accounts: Vec<u8>,
    pub data: Vec<u8>,
}

/// A legacy message: what the signatures sign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub header: MessageHeader,
    pub account_keys: Vec<[u8; KEY_LEN]>,
    pub recent_blockhash: [u8; KEY_LEN],
    pub instructions: Vec<CompiledInstruction>,
}

/// A legacy transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    pub signatures: Vec<[u8; SIGNATURE_LEN]>,
    pub message: Message,
}

impl Transaction {
    /// Decodes `bytes`, which must hold exactly one transaction and nothing else.
    pub fn decode(bytes: &[u8]) -> Result<Transaction, DecodeError> {
        let mut reader = Reader { rest: bytes };
        let count = reader.short_vec_len()?;
        let signatures = reader.arrays::<SIGNATURE_LEN>(count)?;
        let message = Message::read(&mut reader)?;
        reader.finish()?;
        Ok(Transaction {
            signatures,
            message,
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        write_short_vec_len(&mut out, self.signatures.len());
        for signature in &self.signatures {
            out.extend_from_slice(signature);
        }
        self.message.write(&mut out);
        out
    }
}

impl Message {
    /// Decodes `bytes`, which must hold exactly one legacy message and nothing else.
    pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
        let mut reader = Reader { rest: bytes };
        let message = Message::read(&mut reader)?;
        reader.finish()?;
        Ok(message)
    }

    /// The bytes the signatures sign.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(192);
        self.write(&mut out);
        out
    }

    fn read(reader: &mut Reader<'_>) -> Result<Message, DecodeError> {
        let required_signatures = reader.byte()?;
        if required_signatures & VERSIONED_MESSAGE_BIT != 0 {
            return Err(DecodeError::Versioned);
        }
        let header = MessageHeader {
            required_signatures,
            readonly_signed: reader.byte()?,
            readonly_unsigned: reader.byte()?,
        };
        let key_count = reader.short_vec_len()?;
        let account_keys = reader.arrays::<KEY_LEN>(key_count)?;
        let recent_blockhash = reader.array::<KEY_LEN>()?;
        let instruction_count = reader.short_vec_len()?;
        // Each instruction takes at least three bytes, so a count beyond that is truncated
        // input and no large allocation is made for it.
        if instruction_count > reader.rest.len() / 3 {
            return Err(DecodeError::Truncated);
        }
        let mut instructions = Vec::with_capacity(instruction_count);
        for _ in 0..instruction_count {
            let program_index = reader.byte()?;
            let account_count = reader.short_vec_len()?;
            let accounts = reader.take(account_count)?.to_vec();
            let data_len = reader.short_vec_len()?;
            let data = reader.take(data_len)?.to_vec();
            instructions.push(CompiledInstruction {
                program_index,
                accounts,
                data,
            });
        }
        Ok(Message {
            header,
            account_keys,
            recent_blockhash,
            instructions,
        })
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.push(self.header.required_signatures);
        out.push(self.header.readonly_signed);
        out.push(self.header.readonly_unsigned);
        write_short_vec_len(out, self.account_keys.len());
        for key in &self.account_keys {
            out.extend_from_slice(key);
        }
        out.extend_from_slice(&self.recent_blockhash);
        write_short_vec_len(out, self.instructions.len());
        for instruction in &self.instructions {
            out.push(instruction.program_index);
            write_short_vec_len(out, instruction.accounts.len());
            out.extend_from_slice(&instruction.accounts);
            write_short_vec_len(out, instruction.data.len());
            out.extend_from_slice(&instruction.data);
        }
    }
}

/// Appends a compact length. Lengths come from vectors this module built or decoded, all far
/// below the 16-bit limit; a larger one is written as the limit rather than wrapped, so the
/// result can never be read back as a different, valid transaction.
pub fn write_short_vec_len(out: &mut Vec<u8>, len: usize) {
    let mut rest = len.min(SHORT_VEC_MAX);
    loop {
        let low = (rest & 0x7f) as u8;
        rest >>= 7;
        if rest == 0 {
            out.push(low);
            return;
        }
        out.push(low | 0x80);
    }
}

/// A cursor over untrusted bytes; every read is bounds-checked.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        if len > self.rest.len() {
            return Err(DecodeError::Truncated);
        }
        let (head, tail) = self.rest.split_at(len);
        self.rest = tail;
        Ok(head)
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        let (&first, tail) = self.rest.split_first().ok_or(DecodeError::Truncated)?;
        self.rest = tail;
        Ok(first)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn arrays<const N: usize>(&mut self, count: usize) -> Result<Vec<[u8; N]>, DecodeError> {
        // Checked before allocating, so a forged count costs nothing.
        if count > self.rest.len() / N {
            return Err(DecodeError::Truncated);
        }
        (0..count).map(|_| self.array::<N>()).collect()
    }

    /// Reads a compact length: seven bits a byte, low bits first, at most three bytes, the
    /// third holding the top two bits of a 16-bit value.
    fn short_vec_len(&mut self) -> Result<usize, DecodeError> {
        let mut value = 0usize;
        for position in 0..3 {
            let byte = self.byte()?;
            let bits = usize::from(byte & 0x7f);
            if position == 2 && byte > 0x03 {
                return Err(DecodeError::LengthTooLarge);
            }
            value |= bits << (7 * position);
            if byte & 0x80 == 0 {
                // A zero final byte after the first means a shorter form existed.
                if position > 0 && byte == 0 {
                    return Err(DecodeError::LengthNotMinimal);
                }
                return Ok(value);
            }
        }
        Err(DecodeError::LengthTooLarge)
    }

    fn finish(&self) -> Result<(), DecodeError> {
        match self.rest.len() {
            0 => Ok(()),
            extra => Err(DecodeError::TrailingBytes(extra)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_len(bytes: &[u8]) -> Result<usize, DecodeError> {
        let mut reader = Reader { rest: bytes };
        let len = reader.short_vec_len()?;
        reader.finish()?;
        Ok(len)
    }

    #[test]
    fn short_vec_lengths_round_trip_at_every_boundary() {
        for len in [0, 1, 0x7f, 0x80, 0x3fff, 0x4000, 0xffff] {
            let mut out = Vec::new();
            write_short_vec_len(&mut out, len);
            assert_eq!(read_len(&out), Ok(len), "{len:#x} as {out:02x?}");
        }
        let mut out = Vec::new();
        write_short_vec_len(&mut out, 0x80);
        assert_eq!(out, [0x80, 0x01]);
    }

    #[test]
    fn short_vec_refuses_long_forms_and_overflow() {
        assert_eq!(read_len(&[0x80, 0x00]), Err(DecodeError::LengthNotMinimal));
        assert_eq!(
            read_len(&[0x81, 0x80, 0x00]),
            Err(DecodeError::LengthNotMinimal)
        );
        assert_eq!(
            read_len(&[0xff, 0xff, 0x04]),
            Err(DecodeError::LengthTooLarge)
        );
        assert_eq!(
            read_len(&[0xff, 0xff, 0x83]),
            Err(DecodeError::LengthTooLarge)
        );
        assert_eq!(read_len(&[0x80]), Err(DecodeError::Truncated));
    }

    #[test]
    fn versioned_messages_are_refused() {
        assert_eq!(
            Message::decode(&[0x80, 1, 0, 0]),
            Err(DecodeError::Versioned)
        );
    }
}
