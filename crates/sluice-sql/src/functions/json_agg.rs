//! Flink's JSON aggregates (Flink docs: System (Built-in) Functions > JSON Functions):
//! `JSON_OBJECTAGG([KEY] k VALUE v [NULL|ABSENT ON NULL])` and
//! `JSON_ARRAYAGG(v [NULL|ABSENT ON NULL])`, planned by `syntax.rs` as
//! `$json_objectagg('<mode>:<kind>', k, v)` and `$json_arrayagg('<mode>:<kind>', v)`.
//!
//! Values are encoded as the JSON constructors encode them (`json::json_of`; a nested
//! `JSON_OBJECT` / `JSON_ARRAY` is inserted as JSON). The result is a `STRING`, never NULL:
//! `{}` / `[]` for a group without values.
//! - `JSON_OBJECTAGG`: keys sorted (as Flink writes them), NULL ON NULL by default; a NULL
//!   key or a key already in the group is an error, as in Flink; a retraction removes its
//!   key.
//! - `JSON_ARRAYAGG`: arrival order, ABSENT ON NULL by default; a retraction removes the
//!   first equal element (Flink's `ListView.remove`).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion_common::arrow::array::{Array, ArrayRef, AsArray};
use datafusion_common::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion_common::{exec_err, plan_err, Result, ScalarValue};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility};

use super::json::json_of;
use super::rows::{str_at, strs};

/// `$json_objectagg` and `$json_arrayagg`.
pub(crate) fn aggregates() -> Vec<Arc<AggregateUDF>> {
    [true, false]
        .into_iter()
        .map(|object| {
            Arc::new(AggregateUDF::new_from_impl(JsonAgg {
                object,
                signature: Signature::user_defined(Volatility::Immutable),
            }))
        })
        .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonAgg {
    /// `JSON_OBJECTAGG` (else `JSON_ARRAYAGG`).
    object: bool,
    signature: Signature,
}

impl JsonAgg {
    fn flink_name(&self) -> &'static str {
        if self.object {
            "JSON_OBJECTAGG"
        } else {
            "JSON_ARRAYAGG"
        }
    }
}

impl AggregateUDFImpl for JsonAgg {
    fn name(&self) -> &str {
        if self.object {
            "$json_objectagg"
        } else {
            "$json_arrayagg"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let string = |t: &DataType| {
            matches!(
                t,
                DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 | DataType::Null
            )
        };
        let value = |t: &DataType| match t {
            DataType::Null => DataType::Utf8,
            t => t.clone(),
        };
        match (self.object, arg_types) {
            (true, [mode, key, v]) if string(mode) && string(key) => {
                Ok(vec![DataType::Utf8, DataType::Utf8, value(v)])
            }
            (true, [_, key, _]) => plan_err!(
                "JSON_OBJECTAGG takes a STRING key, found {}",
                sluice_common::types::flink_type_name(key)
            ),
            (false, [mode, v]) if string(mode) => Ok(vec![DataType::Utf8, value(v)]),
            _ => plan_err!("{} takes one value", self.flink_name()),
        }
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn is_nullable(&self) -> bool {
        false
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let list = sluice_common::types::array_type(DataType::Utf8, true);
        Ok(vec![
            Arc::new(Field::new(
                format!("{}[keys]", args.name),
                list.clone(),
                true,
            )),
            Arc::new(Field::new(format!("{}[values]", args.name), list, true)),
        ])
    }

    fn accumulator(&self, _: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(JsonAccumulator {
            object: self.object,
            members: BTreeMap::new(),
            items: Vec::new(),
        }))
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.accumulator(args)
    }
}

/// The group's members as JSON text: by key (`JSON_OBJECTAGG`) or in arrival order.
#[derive(Debug)]
struct JsonAccumulator {
    object: bool,
    members: BTreeMap<String, String>,
    items: Vec<String>,
}

impl JsonAccumulator {
    /// Each row's key (objects) and JSON text, `None` for a NULL left out (ABSENT ON NULL).
    fn rows(&self, values: &[ArrayRef]) -> Result<Vec<(Option<String>, Option<String>)>> {
        let spec = str_at(strs(&values[0]), 0).unwrap_or("NULL:").to_string();
        let (mode, kind) = spec.split_once(':').unwrap_or(("NULL", "v"));
        let (absent, raw) = (mode == "ABSENT", kind == "j");
        let value = values.last().expect("a value argument");
        let keys = self.object.then(|| strs(&values[1]));
        let mut out = Vec::with_capacity(value.len());
        for i in 0..value.len() {
            let key = match keys {
                Some(k) => match str_at(k, i) {
                    Some(k) => Some(k.to_string()),
                    None => return exec_err!("JSON_OBJECTAGG: a key is NULL"),
                },
                None => None,
            };
            let text = match json_of(value, i, raw)? {
                Some(t) => Some(t),
                None if absent => None,
                None => Some("null".to_string()),
            };
            out.push((key, text));
        }
        Ok(out)
    }
}

impl Accumulator for JsonAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        for (key, text) in self.rows(values)? {
            let Some(text) = text else { continue };
            match key {
                Some(k) if self.members.contains_key(&k) => {
                    return exec_err!(
                        "JSON_OBJECTAGG: key '{k}' is already present; duplicate keys are not \
                         allowed (Flink's rule)"
                    )
                }
                Some(k) => {
                    self.members.insert(k, text);
                }
                None => self.items.push(text),
            }
        }
        Ok(())
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        for (key, text) in self.rows(values)? {
            // A NULL left out when it arrived (ABSENT ON NULL) has nothing to remove.
            let Some(text) = text else { continue };
            match key {
                Some(k) => {
                    self.members.remove(&k);
                }
                None => {
                    if let Some(p) = self.items.iter().position(|t| *t == text) {
                        self.items.remove(p);
                    }
                }
            }
        }
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let text = if self.object {
            let body: Vec<String> = self
                .members
                .iter()
                .map(|(k, v)| format!("{}:{v}", serde_json::Value::String(k.clone())))
                .collect();
            format!("{{{}}}", body.join(","))
        } else {
            format!("[{}]", self.items.join(","))
        };
        Ok(ScalarValue::Utf8(Some(text)))
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
            + self
                .members
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .chain(self.items.iter().map(String::len))
                .sum::<usize>()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let list = |v: Vec<&String>| {
            let items: Vec<ScalarValue> = v
                .into_iter()
                .map(|s| ScalarValue::Utf8(Some(s.clone())))
                .collect();
            ScalarValue::List(ScalarValue::new_list_nullable(&items, &DataType::Utf8))
        };
        let (keys, values): (Vec<&String>, Vec<&String>) = if self.object {
            self.members.iter().unzip()
        } else {
            (Vec::new(), self.items.iter().collect())
        };
        Ok(vec![list(keys), list(values)])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let (keys, values) = (states[0].as_list::<i32>(), states[1].as_list::<i32>());
        for i in 0..values.len() {
            if values.is_null(i) {
                continue;
            }
            let v = values.value(i);
            let v = v.as_string::<i32>();
            if self.object {
                let k = keys.value(i);
                let k = k.as_string::<i32>();
                for j in 0..v.len() {
                    self.members
                        .insert(k.value(j).to_string(), v.value(j).to_string());
                }
            } else {
                self.items.extend(v.iter().flatten().map(str::to_string));
            }
        }
        Ok(())
    }
}
