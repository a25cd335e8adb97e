//! Runs one target's harness over files, like the fuzzer would, on the
//! stable toolchain: `cargo run --example replay -- TARGET FILE...`
//! (DUET_FUZZ_TRACE=1 prints what the stateful servers answer).

fn main() {
    let mut args = std::env::args().skip(1);
    let target = args.next().expect("usage: replay TARGET FILE...");
    for f in args {
        let data = std::fs::read(&f).unwrap();
        duet_fuzz::run(&target, &data);
        println!("{f}: ok");
    }
}
