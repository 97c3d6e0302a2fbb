//! One `ScalarUDFImpl` for Flink's built-in scalar functions: a function is its name, the
//! argument kinds it accepts (each kind says which Arrow type an argument is coerced to),
//! its result type and an evaluation over whole argument arrays.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion_common::arrow::array::{Array, ArrayRef};
use datafusion_common::arrow::datatypes::{DataType, TimeUnit};
use datafusion_common::{plan_err, Result, ScalarValue};
use datafusion_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use sluice_common::time::Tz;

/// What an argument is coerced to before the function sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Arg {
    /// Any character string (or NULL) → `Utf8`.
    Str,
    /// Any integer; the function sees `Int64` (a constant stays a constant for the
    /// result type, so it is cast when the function runs).
    Int,
    /// Any number → `Float64`.
    Float,
    /// Any integer, floating-point or decimal number, kept as it is.
    Number,
    /// A `TIMESTAMP(p)` or `TIMESTAMP_LTZ(p)`, kept as it is; a string → `TIMESTAMP(3)`.
    Timestamp,
    /// A `DATE`, or a timestamp, kept as it is; a string → `DATE`.
    DateOrTimestamp,
    /// Anything, kept as it is.
    Any,
    /// An `ARRAY` (Arrow `List`), kept as it is.
    Array,
    /// A `MAP`, kept as it is.
    Map,
    /// Every `Common` argument of a call is coerced to one type (DataFusion's
    /// `type_union_resolution`, as for the branches of a `UNION`): `ARRAY[...]`'s elements,
    /// `ARRAY_CONCAT`'s arrays.
    Common,
    /// A `BITMAP` (Arrow `LargeBinary`, see `bitmap`).
    Bitmap,
    /// `BYTES` (`BINARY`, `VARBINARY`) → `Binary`.
    Bytes,
    /// Coerced to the element type of the first argument (an array's element, a map's
    /// key): the needle of `ARRAY_CONTAINS`, a map subscript.
    Element,
}

impl Arg {
    /// The type an argument of type `t` is coerced to, `None` when it cannot be.
    fn coerce(self, t: &DataType) -> Option<DataType> {
        use DataType::*;
        let string = matches!(t, Utf8 | LargeUtf8 | Utf8View | Null);
        let integer = t.is_integer() || *t == Null;
        let number = t.is_numeric() || *t == Null;
        match self {
            Arg::Str if string => Some(Utf8),
            Arg::Int if *t == Null => Some(Int64),
            Arg::Int if integer => Some(t.clone()),
            Arg::Float if number => Some(Float64),
            Arg::Number if *t == Null => Some(Int32),
            Arg::Number if number => Some(t.clone()),
            Arg::Timestamp | Arg::DateOrTimestamp if matches!(t, Timestamp(_, _)) => {
                Some(t.clone())
            }
            Arg::Timestamp if string => Some(Timestamp(TimeUnit::Millisecond, None)),
            Arg::DateOrTimestamp if matches!(t, Date32) => Some(Date32),
            Arg::DateOrTimestamp if string => Some(Date32),
            Arg::Any | Arg::Common | Arg::Element => Some(t.clone()),
            Arg::Array if matches!(t, List(_)) => Some(t.clone()),
            // A MULTISET is a `Map` inside, not a MAP: Flink's MAP functions refuse it.
            Arg::Map if matches!(t, Map(_, _)) && !sluice_common::types::is_multiset(t) => {
                Some(t.clone())
            }
            Arg::Bitmap if matches!(t, LargeBinary | Null) => Some(LargeBinary),
            Arg::Bytes if matches!(t, Binary | BinaryView | FixedSizeBinary(_) | Null) => {
                Some(Binary)
            }
            _ => None,
        }
    }

    fn flink_name(self) -> &'static str {
        match self {
            Arg::Str => "STRING",
            Arg::Int => "an integer",
            Arg::Float | Arg::Number => "a number",
            Arg::Timestamp => "a TIMESTAMP or TIMESTAMP_LTZ",
            Arg::DateOrTimestamp => "a DATE or TIMESTAMP",
            Arg::Any | Arg::Common => "any value",
            Arg::Array => "an ARRAY",
            Arg::Map => "a MAP",
            Arg::Bitmap => "a BITMAP",
            Arg::Bytes => "BYTES",
            Arg::Element => "an element of the first argument",
        }
    }
}

/// The arguments of one call, as arrays of `rows` rows after coercion.
pub(crate) struct Call<'a> {
    pub(crate) args: Vec<ArrayRef>,
    pub(crate) rows: usize,
    pub(crate) return_type: &'a DataType,
    /// The session time zone (`'table.local-time-zone'`).
    pub(crate) zone: Tz,
}

/// Result type from the coerced argument types (and constant arguments, where the type
/// depends on one).
pub(crate) type ReturnFn = fn(&[DataType], &[Option<&ScalarValue>]) -> Result<DataType>;
/// Evaluation over whole columns.
pub(crate) type EvalFn = fn(&Call) -> Result<ArrayRef>;

/// A Flink built-in scalar function. Its `Debug` form is its name only (plan fingerprints
/// are built from `Debug` text, and function addresses change between processes).
pub(crate) struct FlinkScalar {
    name: &'static str,
    arities: &'static [&'static [Arg]],
    /// The last kind of the longest arity repeats (`CONCAT(s, ...)`).
    variadic: bool,
    /// The arity's kinds repeat as a whole (`MAP[k, v, k, v, ...]`).
    cycle: bool,
    processing_time: bool,
    ret: ReturnFn,
    eval: EvalFn,
    signature: Signature,
    zone: Tz,
}

impl std::fmt::Debug for FlinkScalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FlinkScalar({})", self.name)
    }
}

impl PartialEq for FlinkScalar {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.zone.to_string() == other.zone.to_string()
    }
}
impl Eq for FlinkScalar {}
impl Hash for FlinkScalar {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
        self.zone.to_string().hash(state);
    }
}

/// Declares a function; see [`FlinkScalar`].
pub(crate) struct Def {
    pub(crate) name: &'static str,
    pub(crate) arities: &'static [&'static [Arg]],
    pub(crate) variadic: bool,
    pub(crate) cycle: bool,
    pub(crate) volatile: bool,
    /// The result is a processing-time attribute (`PROCTIME()`): NOT NULL, marked with
    /// `sluice_common::types::PROCTIME_KEY`, so that a view's or subquery's
    /// `PROCTIME() AS pt` can drive processing-time windows and lookup joins.
    pub(crate) processing_time: bool,
    pub(crate) ret: ReturnFn,
    pub(crate) eval: EvalFn,
}

impl Def {
    /// A function taking one of `arities`.
    pub(crate) const fn new(
        name: &'static str,
        arities: &'static [&'static [Arg]],
        ret: ReturnFn,
        eval: EvalFn,
    ) -> Def {
        Def {
            name,
            arities,
            variadic: false,
            cycle: false,
            volatile: false,
            processing_time: false,
            ret,
            eval,
        }
    }

    /// The result is a processing-time attribute (see [`Def::processing_time`]).
    pub(crate) const fn processing_time_attribute(mut self) -> Def {
        self.processing_time = true;
        self
    }

    /// The kinds of the (one) arity repeat as a whole: `MAP[k1, v1, k2, v2, ...]`.
    pub(crate) const fn pairs(mut self) -> Def {
        self.cycle = true;
        self
    }

    /// The last argument kind repeats.
    pub(crate) const fn variadic(mut self) -> Def {
        self.variadic = true;
        self
    }

    /// Evaluated anew for every row (`RAND()`, `UUID()`, `NOW()`): never folded.
    pub(crate) const fn volatile(mut self) -> Def {
        self.volatile = true;
        self
    }

    /// The function for a session in `zone`.
    pub(crate) fn udf(&self, zone: Tz) -> Arc<ScalarUDF> {
        let volatility = if self.volatile {
            Volatility::Volatile
        } else {
            Volatility::Immutable
        };
        let signature = if self.arities.iter().all(|a| a.is_empty()) {
            Signature::nullary(volatility)
        } else {
            Signature::user_defined(volatility)
        };
        Arc::new(ScalarUDF::new_from_impl(FlinkScalar {
            name: self.name,
            arities: self.arities,
            variadic: self.variadic,
            cycle: self.cycle,
            processing_time: self.processing_time,
            ret: self.ret,
            eval: self.eval,
            signature,
            zone,
        }))
    }
}

/// The second coercion pass: `Common` arguments to their common type, then `Element`
/// arguments to the first argument's element type. `None` when they have none.
fn coerce_together(kinds: &[Arg], mut types: Vec<DataType>) -> Option<Vec<DataType>> {
    use datafusion_expr::type_coercion::binary::{comparison_coercion, type_union_resolution};
    let common: Vec<DataType> = kinds
        .iter()
        .zip(&types)
        .filter(|(k, _)| **k == Arg::Common)
        .map(|(_, t)| t.clone())
        .collect();
    if !common.is_empty() {
        let to = type_union_resolution(&common)?;
        for (k, t) in kinds.iter().zip(types.iter_mut()) {
            if *k == Arg::Common {
                *t = to.clone();
            }
        }
    }
    if kinds.contains(&Arg::Element) {
        let element = super::collection::needle_type(types.first()?)?;
        for (k, t) in kinds.iter().zip(types.iter_mut()) {
            if *k == Arg::Element {
                if *t != DataType::Null && *t != element {
                    comparison_coercion(&element, t)?;
                }
                *t = element.clone();
            }
        }
    }
    Some(types)
}

impl FlinkScalar {
    /// The argument kinds of the first arity `arg_types` fit, with the coerced types.
    fn matching_arity(&self, arg_types: &[DataType]) -> Option<(Vec<Arg>, Vec<DataType>)> {
        for arity in self.arities {
            let fits = if self.cycle {
                !arity.is_empty() && !arg_types.is_empty() && arg_types.len() % arity.len() == 0
            } else {
                arg_types.len() == arity.len()
                    || (self.variadic && !arity.is_empty() && arg_types.len() > arity.len())
            };
            if !fits {
                continue;
            }
            let kinds: Vec<Arg> = (0..arg_types.len())
                .map(|i| {
                    if self.cycle {
                        arity[i % arity.len()]
                    } else {
                        arity[i.min(arity.len() - 1)]
                    }
                })
                .collect();
            let coerced: Option<Vec<DataType>> = kinds
                .iter()
                .zip(arg_types)
                .map(|(k, t)| k.coerce(t))
                .collect();
            if let Some(c) = coerced.and_then(|c| coerce_together(&kinds, c)) {
                return Some((kinds, c));
            }
        }
        None
    }

    fn shape(&self) -> String {
        let forms: Vec<String> = self
            .arities
            .iter()
            .map(|a| {
                let mut kinds: Vec<&str> = a.iter().map(|k| k.flink_name()).collect();
                if self.variadic {
                    kinds.push("...");
                }
                format!("{}({})", self.name.to_uppercase(), kinds.join(", "))
            })
            .collect();
        forms.join(" or ")
    }
}

impl ScalarUDFImpl for FlinkScalar {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        if let Some((_, coerced)) = self.matching_arity(arg_types) {
            return Ok(coerced);
        }
        let given: Vec<String> = arg_types
            .iter()
            .map(|t| sluice_common::types::flink_type_name(t))
            .collect();
        plan_err!(
            "{} cannot take ({}); it takes {}",
            self.name.to_uppercase(),
            given.join(", "),
            self.shape()
        )
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        (self.ret)(arg_types, &vec![None; arg_types.len()])
    }

    fn return_field_from_args(
        &self,
        args: datafusion_expr::ReturnFieldArgs,
    ) -> Result<datafusion_common::arrow::datatypes::FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let t = (self.ret)(&types, args.scalar_arguments)?;
        let field = datafusion_common::arrow::datatypes::Field::new(self.name, t, true);
        if self.processing_time {
            let key = sluice_common::types::PROCTIME_KEY.to_string();
            return Ok(Arc::new(
                field
                    .with_nullable(false)
                    .with_metadata([(key, "true".to_string())].into()),
            ));
        }
        Ok(Arc::new(field))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let kinds = self
            .matching_arity(&types)
            .map(|(k, _)| k)
            .unwrap_or_default();
        let volatile = self.signature.volatility == Volatility::Volatile;
        on_arrays(&args, !volatile, |arrays, n| {
            let arrays = arrays
                .into_iter()
                .enumerate()
                .map(|(i, a)| match kinds.get(i) {
                    Some(Arg::Int) if a.data_type() != &DataType::Int64 => Ok(
                        datafusion_common::arrow::compute::cast(&a, &DataType::Int64)?,
                    ),
                    _ => Ok(a),
                })
                .collect::<Result<Vec<_>>>()?;
            (self.eval)(&Call {
                args: arrays,
                rows: n,
                return_type: args.return_field.data_type(),
                zone: self.zone,
            })
        })
    }
}

/// Runs `f` over the arguments as arrays of `n` rows and returns its column: when every
/// argument is a constant and `fold` allows, on one row, giving a constant (a function of
/// constants is evaluated once per batch, not per row).
pub(crate) fn on_arrays(
    args: &ScalarFunctionArgs,
    fold: bool,
    f: impl FnOnce(Vec<ArrayRef>, usize) -> Result<ArrayRef>,
) -> Result<ColumnarValue> {
    let rows = args.number_rows;
    let constant = fold
        && args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
    let n = if constant { 1 } else { rows };
    let arrays = args
        .args
        .iter()
        .map(|a| a.to_array(n))
        .collect::<Result<Vec<_>>>()?;
    let out = f(arrays, n)?;
    debug_assert_eq!(out.len(), n);
    if constant {
        Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?))
    } else {
        Ok(ColumnarValue::Array(out))
    }
}

/// The result type is always `t`.
#[macro_export]
#[doc(hidden)]
macro_rules! returns {
    ($t:expr) => {
        |_, _| Ok($t)
    };
}
