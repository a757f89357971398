//! Versions (hybrid logical clock values) crossing to and from JavaScript.
//!
//! `Hlc` is a JavaScript class of `index.ts` that holds the three parts, `ms`, `counter` and
//! `nodeId`; every rule about them (the checks of `new Hlc`, parsing, the wire form, the
//! order) runs here, in the core. A version made by the core (the version of every `get`,
//! `set` and notification, the token of every lease) is built by calling the class's factory,
//! registered once per JavaScript environment by `index.ts`: a plain JavaScript object, with
//! nothing for the garbage collector to finalize. (As a native class, each one cost a wrap, a
//! reference and a finalizer, about 1 µs of the JavaScript thread per `get`:
//! docs/performance.md#decisions.)

use std::cmp::Ordering;

use mqstate::Error;
use napi::bindgen_prelude::{
    BigInt, Either, FnArgs, FromNapiValue, Function, FunctionRef, JsObjectValue, Object,
    ToNapiValue, TypeName, Unknown, ValidateNapiValue, ValueType,
};
use napi::{Env, JsValue, sys};
use napi_derive::napi;

use crate::error::js_error;

/// A version in Rust; in JavaScript, an instance of `index.ts`'s `Hlc` class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hlc {
    pub(crate) inner: mqstate::Hlc,
}

impl From<mqstate::Hlc> for Hlc {
    fn from(inner: mqstate::Hlc) -> Self {
        Hlc { inner }
    }
}

/// `index.ts`'s factory of `Hlc` instances from parts the core made (so not checked again).
type Factory = FunctionRef<FnArgs<(BigInt, BigInt, String)>, Unknown<'static>>;

/// What `hlcClass` registers in the environment's instance data.
struct HlcClass {
    make: Factory,
}

/// Registers the factory that turns the core's versions into `Hlc` instances. `index.ts`
/// calls it when it loads; if it loads again in the same environment (a test runner that
/// resets its module registry), the new factory replaces the old one, so versions are
/// instances of the class that environment now exports.
#[napi(js_name = "hlcClass")]
pub fn hlc_class(
    env: Env,
    make: Function<FnArgs<(BigInt, BigInt, String)>, Unknown<'static>>,
) -> napi::Result<()> {
    let make = make.create_ref()?;
    match env.get_instance_data::<HlcClass>()? {
        // Replaced in place: `napi_set_instance_data` would not finalize the old data.
        Some(class) => {
            class.make = make;
            Ok(())
        }
        None => env.set_instance_data(HlcClass { make }, (), |_| {}),
    }
}

/// Checks the parts of `new Hlc(ms, counter, nodeId)` (`ms` and `counter` as bigint, or as
/// safe integers); throws `ERR_INVALID_ARGUMENT` naming what is wrong.
#[napi(js_name = "hlcCheck")]
pub fn hlc_check(
    env: Env,
    ms: Either<f64, BigInt>,
    counter: Either<f64, BigInt>,
    node_id: String,
) -> napi::Result<()> {
    let ms = part(&env, "ms", ms)?;
    let counter = part(&env, "counter", counter)?;
    mqstate::Hlc::try_new(ms, counter, node_id)
        .map(drop)
        .map_err(|e| js_error(&env, &Error::from(e), &[]))
}

/// Parses `{ms}:{counter}:{nodeId}` (any zero padding). A malformed text throws an
/// `ERR_INVALID_ARGUMENT` error whose `reason` is the stable code of the failure
/// (`too_few_parts`, `invalid_ms`, ... as in `tests/vectors/hlc.json`).
#[napi(js_name = "hlcParse")]
pub fn hlc_parse(env: Env, text: String) -> napi::Result<Hlc> {
    text.parse::<mqstate::Hlc>().map(Hlc::from).map_err(|e| {
        let reason = e.reason_code().unwrap_or("other");
        js_error(
            &env,
            &Error::InvalidArgument(e.to_string()),
            &[("reason", reason)],
        )
    })
}

/// -1, 0 or 1 as `a` is lower than, equal to or greater than `b`: by `ms`, then `counter`,
/// then `nodeId` compared byte-wise in UTF-8.
#[napi(js_name = "hlcCompare")]
pub fn hlc_compare(a: Hlc, b: Hlc) -> i32 {
    match a.inner.cmp(&b.inner) {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }
}

/// The wire form: `ms` padded to 15 digits, `counter` to 5 (`001696374425000:00000:CLIENT`).
#[napi(js_name = "hlcFormat")]
pub fn hlc_format(h: Hlc) -> String {
    h.inner.to_string()
}

fn part(env: &Env, name: &str, value: Either<f64, BigInt>) -> napi::Result<u64> {
    match value {
        Either::A(n) => crate::util::whole::<u64>(name, n).map_err(|e| js_error(env, &e, &[])),
        Either::B(b) => big(&b).ok_or_else(|| {
            js_error(
                env,
                &Error::InvalidArgument(format!("Hlc {name} must be a bigint from 0 to 2^64 - 1")),
                &[],
            )
        }),
    }
}

/// The value of a bigint from 0 to 2^64 - 1.
fn big(b: &BigInt) -> Option<u64> {
    match b.get_u64() {
        (false, v, true) => Some(v),
        _ => None,
    }
}

impl TypeName for Hlc {
    fn type_name() -> &'static str {
        "Hlc"
    }

    fn value_type() -> ValueType {
        ValueType::Object
    }
}

impl ValidateNapiValue for Hlc {}

impl ToNapiValue for Hlc {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        let env = Env::from_raw(env);
        let class = env.get_instance_data::<HlcClass>()?.ok_or_else(|| {
            napi::Error::from_reason(
                "the Hlc class is not registered: load the package through its index.js",
            )
        })?;
        let mqstate::Hlc {
            ms,
            counter,
            node_id,
        } = val.inner;
        let made = class
            .make
            .borrow_back(&env)?
            .call((BigInt::from(ms), BigInt::from(counter), node_id).into())?;
        Ok(made.raw())
    }
}

impl FromNapiValue for Hlc {
    /// Reads the parts through the class's getters and checks them again, so an object that
    /// only looks like an `Hlc` cannot carry an invalid version into a request.
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi::Result<Self> {
        let object = unsafe { Object::from_napi_value(env, value) }?;
        let not_an_hlc = || napi::Error::new(napi::Status::InvalidArg, "expected an Hlc");
        let ms = big(&object.get_named_property::<BigInt>("ms")?).ok_or_else(not_an_hlc)?;
        let counter =
            big(&object.get_named_property::<BigInt>("counter")?).ok_or_else(not_an_hlc)?;
        let node_id = object.get_named_property::<String>("nodeId")?;
        mqstate::Hlc::try_new(ms, counter, node_id)
            .map(Hlc::from)
            .map_err(|e| napi::Error::new(napi::Status::InvalidArg, e.to_string()))
    }
}
