// Hand-written next to the generated bindings (mqstate.kt): the old names kept for a while.
package dev.mqstate

/** The outcome of a `set`, under its former name: it is [SetOutcome] in every language now. */
@Deprecated("Renamed SetOutcome, its name in every language", ReplaceWith("SetOutcome"))
typealias SetResult = SetOutcome
