//! SPNEGO (RFC 4178) as SMB2 uses it, with NTLMSSP as the only mechanism:
//! the server's NegTokenInit hint in the NEGOTIATE response, the client's
//! NegTokenInit and NegTokenResp, and the server's NegTokenResp. A small
//! DER reader and writer, enough for these tokens; nothing else of ASN.1.

/// 1.3.6.1.5.5.2 (SPNEGO), DER contents.
pub const OID_SPNEGO: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x02];
/// 1.3.6.1.4.1.311.2.2.10 (NTLMSSP), DER contents.
pub const OID_NTLMSSP: &[u8] = &[0x2b, 0x06, 0x01, 0x04, 0x01, 0x82, 0x37, 0x02, 0x02, 0x0a];

/// negState values (RFC 4178 4.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NegState {
    AcceptCompleted = 0,
    AcceptIncomplete = 1,
    Reject = 2,
    RequestMic = 3,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DerError;

/// Reads one TLV: (tag, contents, rest).
pub fn read_tlv(b: &[u8]) -> Result<(u8, &[u8], &[u8]), DerError> {
    let tag = *b.first().ok_or(DerError)?;
    let first = *b.get(1).ok_or(DerError)?;
    let (len, hdr) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return Err(DerError);
        }
        let mut len = 0usize;
        for i in 0..n {
            len = (len << 8) | usize::from(*b.get(2 + i).ok_or(DerError)?);
        }
        (len, 2 + n)
    };
    let end = hdr.checked_add(len).ok_or(DerError)?;
    let contents = b.get(hdr..end).ok_or(DerError)?;
    Ok((tag, contents, &b[end..]))
}

/// Appends a TLV.
pub fn write_tlv(out: &mut Vec<u8>, tag: u8, contents: &[u8]) {
    out.push(tag);
    let n = contents.len();
    if n < 0x80 {
        out.push(n as u8);
    } else if n < 0x100 {
        out.extend_from_slice(&[0x81, n as u8]);
    } else if n < 0x10000 {
        out.extend_from_slice(&[0x82, (n >> 8) as u8, n as u8]);
    } else {
        out.extend_from_slice(&[
            0x84,
            (n >> 24) as u8,
            (n >> 16) as u8,
            (n >> 8) as u8,
            n as u8,
        ]);
    }
    out.extend_from_slice(contents);
}

fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(contents.len() + 6);
    write_tlv(&mut v, tag, contents);
    v
}

/// The fields of a SEQUENCE of context-tagged elements: (context number, contents).
fn context_fields(seq: &[u8]) -> Result<Vec<(u8, &[u8])>, DerError> {
    let mut out = Vec::new();
    let mut rest = seq;
    while !rest.is_empty() {
        let (tag, contents, r) = read_tlv(rest)?;
        if tag & 0xe0 != 0xa0 || out.len() > 16 {
            return Err(DerError);
        }
        out.push((tag & 0x1f, contents));
        rest = r;
    }
    Ok(out)
}

/// The server's initial token (NEGOTIATE response security buffer):
/// NegTokenInit with mechTypes = [NTLMSSP].
pub fn server_hint() -> Vec<u8> {
    let mech = tlv(0x06, OID_NTLMSSP);
    let mech_types = tlv(0x30, &mech);
    let mut fields = tlv(0xa0, &mech_types);
    // negHints { hintName "not_defined_in_RFC4178@please_ignore" } as Windows sends.
    let hint = tlv(0xa0, &tlv(0x1b, b"not_defined_in_RFC4178@please_ignore"));
    fields.extend_from_slice(&tlv(0xa3, &tlv(0x30, &hint)));
    let init = tlv(0xa0, &tlv(0x30, &fields));
    let mut inner = tlv(0x06, OID_SPNEGO);
    inner.extend_from_slice(&init);
    tlv(0x60, &inner)
}

/// What a client's security token holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientToken<'a> {
    /// A bare NTLMSSP message (no SPNEGO).
    Raw(&'a [u8]),
    /// NegTokenInit: the raw MechTypeList (for mechListMIC), whether NTLMSSP
    /// is offered, and the optimistic mechToken.
    Init {
        mech_list: &'a [u8],
        ntlm_offered: bool,
        mech_token: Option<&'a [u8]>,
    },
    /// NegTokenResp: the responseToken and the mechListMIC.
    Resp {
        response_token: Option<&'a [u8]>,
        mech_list_mic: Option<&'a [u8]>,
    },
}

/// Classifies and parses a SESSION_SETUP security buffer.
pub fn parse_client_token(b: &[u8]) -> Result<ClientToken<'_>, DerError> {
    if b.starts_with(b"NTLMSSP\0") {
        return Ok(ClientToken::Raw(b));
    }
    match b.first() {
        Some(0x60) => {
            let (_, app, _) = read_tlv(b)?;
            let (tag, oid, rest) = read_tlv(app)?;
            if tag != 0x06 || oid != OID_SPNEGO {
                return Err(DerError);
            }
            let (tag, init, _) = read_tlv(rest)?;
            if tag != 0xa0 {
                return Err(DerError);
            }
            let (tag, seq, _) = read_tlv(init)?;
            if tag != 0x30 {
                return Err(DerError);
            }
            let mut mech_list: &[u8] = &[];
            let mut ntlm_offered = false;
            let mut mech_token = None;
            for (n, contents) in context_fields(seq)? {
                match n {
                    0 => {
                        let (tag, list, _) = read_tlv(contents)?;
                        if tag != 0x30 {
                            return Err(DerError);
                        }
                        mech_list = contents;
                        let mut rest = list;
                        while !rest.is_empty() {
                            let (tag, oid, r) = read_tlv(rest)?;
                            if tag == 0x06 && oid == OID_NTLMSSP {
                                ntlm_offered = true;
                            }
                            rest = r;
                        }
                    }
                    2 => {
                        let (tag, tok, _) = read_tlv(contents)?;
                        if tag != 0x04 {
                            return Err(DerError);
                        }
                        mech_token = Some(tok);
                    }
                    _ => {}
                }
            }
            Ok(ClientToken::Init {
                mech_list,
                ntlm_offered,
                mech_token,
            })
        }
        Some(0xa1) => {
            let (_, resp, _) = read_tlv(b)?;
            let (tag, seq, _) = read_tlv(resp)?;
            if tag != 0x30 {
                return Err(DerError);
            }
            let mut response_token = None;
            let mut mech_list_mic = None;
            for (n, contents) in context_fields(seq)? {
                let (tag, v, _) = read_tlv(contents)?;
                match (n, tag) {
                    (2, 0x04) => response_token = Some(v),
                    (3, 0x04) => mech_list_mic = Some(v),
                    _ => {}
                }
            }
            Ok(ClientToken::Resp {
                response_token,
                mech_list_mic,
            })
        }
        _ => Err(DerError),
    }
}

/// A server NegTokenResp.
pub fn server_response(
    state: NegState,
    with_mech: bool,
    token: Option<&[u8]>,
    mic: Option<&[u8]>,
) -> Vec<u8> {
    let mut fields = tlv(0xa0, &tlv(0x0a, &[state as u8]));
    if with_mech {
        fields.extend_from_slice(&tlv(0xa1, &tlv(0x06, OID_NTLMSSP)));
    }
    if let Some(t) = token {
        fields.extend_from_slice(&tlv(0xa2, &tlv(0x04, t)));
    }
    if let Some(m) = mic {
        fields.extend_from_slice(&tlv(0xa3, &tlv(0x04, m)));
    }
    tlv(0xa1, &tlv(0x30, &fields))
}

/// A client NegTokenInit carrying `mech_token` (for tests and tools).
pub fn client_init(mech_token: &[u8]) -> Vec<u8> {
    let mech_types = tlv(0x30, &tlv(0x06, OID_NTLMSSP));
    let mut fields = tlv(0xa0, &mech_types);
    fields.extend_from_slice(&tlv(0xa2, &tlv(0x04, mech_token)));
    let mut inner = tlv(0x06, OID_SPNEGO);
    inner.extend_from_slice(&tlv(0xa0, &tlv(0x30, &fields)));
    tlv(0x60, &inner)
}

/// A client NegTokenResp carrying `token` (for tests and tools).
pub fn client_resp(token: &[u8], mic: Option<&[u8]>) -> Vec<u8> {
    let mut fields = tlv(0xa2, &tlv(0x04, token));
    if let Some(m) = mic {
        fields.extend_from_slice(&tlv(0xa3, &tlv(0x04, m)));
    }
    tlv(0xa1, &tlv(0x30, &fields))
}

/// What a server NegTokenResp holds (for tests and tools).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerResp<'a> {
    pub state: Option<u8>,
    pub token: Option<&'a [u8]>,
    pub mic: Option<&'a [u8]>,
}

pub fn parse_server_response(b: &[u8]) -> Result<ServerResp<'_>, DerError> {
    let (tag, resp, _) = read_tlv(b)?;
    if tag != 0xa1 {
        return Err(DerError);
    }
    let (_, seq, _) = read_tlv(resp)?;
    let mut out = ServerResp {
        state: None,
        token: None,
        mic: None,
    };
    for (n, contents) in context_fields(seq)? {
        let (_, v, _) = read_tlv(contents)?;
        match n {
            0 => out.state = v.first().copied(),
            2 => out.token = Some(v),
            3 => out.mic = Some(v),
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        let init = client_init(b"NTLMSSP\0abc");
        match parse_client_token(&init).unwrap() {
            ClientToken::Init {
                ntlm_offered,
                mech_token,
                mech_list,
            } => {
                assert!(ntlm_offered);
                assert_eq!(mech_token, Some(&b"NTLMSSP\0abc"[..]));
                assert_eq!(mech_list[0], 0x30);
            }
            other => panic!("{other:?}"),
        }
        let resp = client_resp(&[1; 300], Some(&[2; 16]));
        assert_eq!(
            parse_client_token(&resp).unwrap(),
            ClientToken::Resp {
                response_token: Some(&[1; 300][..]),
                mech_list_mic: Some(&[2; 16][..])
            }
        );
        let s = server_response(NegState::AcceptIncomplete, true, Some(b"x"), None);
        let p = parse_server_response(&s).unwrap();
        assert_eq!(p.state, Some(1));
        assert_eq!(p.token, Some(&b"x"[..]));
        assert!(server_hint().starts_with(&[0x60]));
    }

    #[test]
    fn hostile_tokens_do_not_panic() {
        let init = client_init(&[7; 200]);
        for n in 0..init.len() {
            let _ = parse_client_token(&init[..n]);
            let mut m = init.clone();
            m[n] ^= 0xff;
            let _ = parse_client_token(&m);
        }
        assert!(read_tlv(&[0x30, 0x85, 1, 1, 1, 1, 1]).is_err());
    }
}
