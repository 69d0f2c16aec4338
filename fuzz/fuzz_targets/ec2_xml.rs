//! An EC2 Query API reply (DescribeInstances, Stop/Start, errors).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| nodefence::fuzzing::ec2_xml(data));
