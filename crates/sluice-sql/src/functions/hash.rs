//! Flink's hash and encoding functions (Flink docs: System (Built-in) Functions > Hash
//! Functions, String Functions): digests of a string's UTF-8 bytes as lower-case hex.

use base64::Engine as _;
use datafusion_common::arrow::array::ArrayRef;
use datafusion_common::arrow::datatypes::DataType;
use datafusion_common::Result;
use sha2::Digest;

use super::rows::{int_at, ints, str_at, string_rows, strs};
use super::udf::{Arg, Call, Def};
use crate::returns;

use Arg::{Int, Str};

/// The functions of this module.
pub(crate) const FUNCTIONS: &[Def] = &[
    Def::new("md5", &[&[Str]], returns!(DataType::Utf8), md5),
    Def::new("sha1", &[&[Str]], returns!(DataType::Utf8), sha1),
    Def::new("sha224", &[&[Str]], returns!(DataType::Utf8), sha224),
    Def::new("sha256", &[&[Str]], returns!(DataType::Utf8), sha256),
    Def::new("sha384", &[&[Str]], returns!(DataType::Utf8), sha384),
    Def::new("sha512", &[&[Str]], returns!(DataType::Utf8), sha512),
    Def::new("sha2", &[&[Str, Int]], returns!(DataType::Utf8), sha2),
    Def::new("to_base64", &[&[Str]], returns!(DataType::Utf8), to_base64),
    Def::new(
        "from_base64",
        &[&[Str]],
        returns!(DataType::Utf8),
        from_base64,
    ),
    Def::new("uuid", &[&[]], returns!(DataType::Utf8), uuid).volatile(),
];

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn digest_rows<D: Digest>(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    Ok(string_rows(c.rows, |i| {
        Some(hex(&D::digest(str_at(s, i)?.as_bytes())))
    }))
}

fn md5(c: &Call) -> Result<ArrayRef> {
    digest_rows::<md5::Md5>(c)
}
fn sha1(c: &Call) -> Result<ArrayRef> {
    digest_rows::<sha1::Sha1>(c)
}
fn sha224(c: &Call) -> Result<ArrayRef> {
    digest_rows::<sha2::Sha224>(c)
}
fn sha256(c: &Call) -> Result<ArrayRef> {
    digest_rows::<sha2::Sha256>(c)
}
fn sha384(c: &Call) -> Result<ArrayRef> {
    digest_rows::<sha2::Sha384>(c)
}
fn sha512(c: &Call) -> Result<ArrayRef> {
    digest_rows::<sha2::Sha512>(c)
}

/// `SHA2(s, bits)`: SHA-224, 256, 384 or 512.
///
/// # Errors
/// Another `bits` (Flink fails the job too).
fn sha2(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let bits = ints(&c.args[1]);
    for i in 0..c.rows {
        if let Some(b) = int_at(bits, i).filter(|b| ![224, 256, 384, 512].contains(b)) {
            return datafusion_common::exec_err!(
                "SHA2: the bit length must be 224, 256, 384 or 512, found {b}"
            );
        }
    }
    Ok(string_rows(c.rows, |i| {
        let b = str_at(s, i)?.as_bytes();
        Some(match int_at(bits, i)? {
            224 => hex(&sha2::Sha224::digest(b)),
            256 => hex(&sha2::Sha256::digest(b)),
            384 => hex(&sha2::Sha384::digest(b)),
            512 => hex(&sha2::Sha512::digest(b)),
            _ => return None,
        })
    }))
}

fn to_base64(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let engine = base64::engine::general_purpose::STANDARD;
    Ok(string_rows(c.rows, |i| Some(engine.encode(str_at(s, i)?))))
}

/// `FROM_BASE64(s)`: the decoded bytes as UTF-8 text; NULL for text that is not base64.
fn from_base64(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let engine = base64::engine::general_purpose::STANDARD;
    Ok(string_rows(c.rows, |i| {
        let bytes = engine.decode(str_at(s, i)?).ok()?;
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }))
}

/// `UUID()`: a random (version 4) UUID for every row.
fn uuid(c: &Call) -> Result<ArrayRef> {
    Ok(string_rows(c.rows, |_| {
        Some(uuid::Uuid::new_v4().to_string())
    }))
}
