//! A tonic codec of strings as raw UTF-8 messages, shared by the tests on real tonic
//! channels: no codegen, no protobuf.

use bytes::{Buf, BufMut};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// Strings as raw UTF-8 messages.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Text;

impl Codec for Text {
    type Encode = String;
    type Decode = String;
    type Encoder = Text;
    type Decoder = Text;

    fn encoder(&mut self) -> Text {
        Text
    }

    fn decoder(&mut self) -> Text {
        Text
    }
}

impl Encoder for Text {
    type Item = String;
    type Error = Status;

    fn encode(&mut self, item: String, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(item.as_bytes());
        Ok(())
    }
}

impl Decoder for Text {
    type Item = String;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<String>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|e| Status::internal(format!("not UTF-8: {e}")))
    }
}
