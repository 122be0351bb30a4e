//! Reading structured inputs from fuzz bytes: small numbers and short strings, every input valid (missing
//! bytes read as zero, so the fuzzer's mutations keep meaning something).

pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    /// The next byte (0 when the input is used up).
    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// The next two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    /// Bytes up to the next NUL (not included) or the end, at most `max` of them.
    pub fn bytes(&mut self, max: usize) -> &'a [u8] {
        let end = self.data.iter().take(max).position(|&b| b == 0);
        let (s, rest) = match end {
            Some(e) => (&self.data[..e], &self.data[e + 1..]),
            None => {
                let n = self.data.len().min(max);
                (&self.data[..n], &self.data[n..])
            }
        };
        self.data = rest;
        s
    }

    /// What is left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}
