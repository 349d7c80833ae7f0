"""RE2 programs known to build: the built-in pack's ASCII ones, and the UTF-8 ones of its
largest regexes.

A rule regex has two RE2 programs (rx.Pattern): one for ASCII texts, built when the rule
loads, and one for any other text, built when such a text first comes; but when the
ASCII program is large (over ``rx.EAGER_UTF8_ABOVE`` instructions) the UTF-8 one is
built at once too, so that one RE2 cannot build is refused when its rule loads, not in
the middle of a watch. For the built-in pack that check is done here, once: these are
the digests (``rx.utf8_digest``) of the translated patterns it builds so, each built by
RE2 when this list was made. Starting a watch built one of them for 14-23 ms of CPU
(the alternation of test-file names), which no text of the shared corpus ever needed.

The ASCII programs (``KNOWN_ASCII``) are built when a text first needs them. Each rule
regex had its ASCII program built when its rule loaded, so that one RE2 could not build
was known then: for the pack's, that is known here. A watch's start spent about a tenth
of its instructions on them (callgrind: 140 M of 1.26 G, starting a scan), and most are
never searched: the 375 SWE-bench runs search 34 of the 108, the 5,000 small samples 2.

A pattern is named by its text, so one a user's library changes (a list redefined) is
not in these lists and is built at once, as before. ``tests/engine/test_rx.py`` keeps the
lists equal to the pack's; after changing a built-in regex, write them anew with
``python -m tests.engine.re2_known`` (from the sources, not a compiled build).
"""

from __future__ import annotations

KNOWN_UTF8: frozenset[str] = frozenset({
    "1010639daaa7bc5138350da9a45ba83b",
    "d45e848e7539a544475a38035dad5db6",
})

KNOWN_ASCII: frozenset[str] = frozenset({
    "01a8349a93de479bcfff70139df2e820",
    "05ca05a35fd6eb4b2b477985348effe7",
    "074b574086e29bae9b90b0d5f8de2ee1",
    "097dbe5bdf3eb95edafb4e9d07763c10",
    "09c5beef10937969a153fd6343ea763c",
    "0bd5f1981251ce5a19ad723b6274e525",
    "0c013e6058047edd83c586d4ca654efe",
    "0e80bc3b08a8770455fb99d6a2b14629",
    "0e89157065b83a300eb1a2ba6cef679b",
    "0fc47292335e6ffeb3fee32b71f2ff6d",
    "11ac5f407dae4af252953f5572ffabc0",
    "13a3dcb161d7737a77c2ea02a0856981",
    "13ef714f78887be2bf69c56c08448982",
    "1488bd8054b9657144a730a153337229",
    "1938e643f29771b99d3ecb071092ed8a",
    "1cdfc38749b4a7f3bb94e63c0216af77",
    "217698b5cf754ac6f57f4df6f0c6b3d5",
    "21884c54cbe072504975853ac750addb",
    "238e8429764cfc500197fad6a41809ce",
    "24e837fe54308d5bae9fa46c65186539",
    "27be6e78a2e66c422d874d28be81ba9c",
    "28ef6c3149a45f693ae67273906b523e",
    "296304c2c9001b472948fa2eda063474",
    "2ce17892a9e76d8aff1c89216bdd1318",
    "2ead114e989c55ab11fc12c0dbdd9406",
    "3154953cb12036f850d6b7693417cc23",
    "33d700c4251d5ead3dd957c4f01d77c3",
    "386261dd9c54c1547732cd72357ba3ab",
    "3891d89ac344e7c9a0b94caff22debb0",
    "3c647fe3125040fb9648e7b8392fbd98",
    "3ce1badb274b8cef94332c36696a3392",
    "3cf13310c47e310199399f61708ef39b",
    "3dbd2cf9e96a550d00104e8c13eb1a28",
    "45c4646f22306dc6b0cf953ac6f3f40b",
    "4927a69b35b0c25b7b94d9f097b32f20",
    "4d4ead526aaf7d8ed10c2c582f683e33",
    "56d674abb02c6ae6a1ea011dc396b7bb",
    "577ef2bf2e320cfd71f8b0aac120cd3b",
    "58da8ae250657310b75cb3a4b7131609",
    "598039a5cf7d6b94ba0f5269ddf91bbd",
    "5cc54f91c5a68c66f2d46353cd1db3aa",
    "5ea33ad656dbd2d28bb6fc7e8bbdcd19",
    "6885faee77ffd58883b05a7bc2d26d80",
    "6a94933711a3dcb8bbe131632e8a1cdd",
    "6fe89dc3c52d8bef5fb4c412ae06719d",
    "6ffefd85a99c5f40c6580445e11da7c5",
    "71e1757e6c336ce57c2e31d0ef9d975b",
    "727fa62c4b56535f89a8ca7c31e04e83",
    "73440b6bfaf5e2e55da74186a8e91ea0",
    "766e5577826b001933dfcda3ba89647e",
    "80f51ef0d665c0d2b669aa364ede7a5c",
    "8174940c6df751191b64e1cfdd0ee44c",
    "83dd67c1cb555d6daf27b29eccff256d",
    "84463418d153552bacca93856219a721",
    "84de2b101cd47d4e80341cef1673e174",
    "8bc45fd2b400d35e54dd29942ff38781",
    "8cf6c92cccf1053c7190265c0c7673ac",
    "8e3e15edfd22bb088edf6873bf7d5f06",
    "8e99a782bf5daac68e64deca8aae1365",
    "94475d212a98fd5a9ae69b63a9d51d3c",
    "944da5322443a0c546cee32c970f2c8a",
    "96ca8a3eab4593d177e72557942a8c05",
    "973f9ca26ef27eee78ec816006eefe8c",
    "985382315fab6b2dc28c0d14c7801d8b",
    "99b14b474dc6bb774107d74bff5e0164",
    "9bc654c7e5e0bf3950cb322810dde218",
    "9c632321993fc0166154386fab5c32d0",
    "9ca5600eca7f069d04d95559153011f5",
    "9d43a61c8c6cd2851e37be5e6707ba6a",
    "a018cfb5b3b131e1265ecde21aa7bdf6",
    "a319a2115cb236af031e05fd600db61a",
    "a4d052bcf083782ebc7718153119d1ee",
    "a705d1ec5a9f4bc6a1bb6a6f6d86aad3",
    "aa267b130518ffb41b61d001bede2e8a",
    "aea885913c3a84203b9a83913a621391",
    "b1af88d6bfb82405100d41a532410278",
    "b2cd4eb3c28c86d167881dc3f8406a87",
    "b5916200f4b35b1ba3a9f24182967fe7",
    "b63c1d3cf25578222fd2890418acf846",
    "bbac609c7613776528f8876ef6bfd63c",
    "bbe6c1c5832a20544a39ddc1c93b3d87",
    "c442cc58da6903bc204a44ae70393cd8",
    "c606dea09538c243017a3b5f39bff6cf",
    "c627077c635b4b95ef292e0adcb52829",
    "cc63beeeebe27d0abe1947febe0f882c",
    "cf63b46c27cb531db7cce41336466fc1",
    "d452912f4087299a70b32a639d7ad8f9",
    "da9ab8544479d93bf3b91e1b71c26f56",
    "de6c4fe6f6da04f473fec36bb3d70340",
    "e11e7b1f8c88905eae8108eb2f779ff4",
    "e214d6f628b00ad6619f46e31969d1b4",
    "e319c83ec1496902bb8fd873c35cd7db",
    "e46150f209e4809a95ce32734e0b6bdc",
    "e5d3fa585303a670314f7c7ec6a8ac05",
    "e5ed42ba4b7a990812202e084bc3da1a",
    "eedbd60e8de364c4c69dccf4d45cdd4b",
    "f0aa093d22988c769a3ab618f5a4f82c",
    "f3e11bd72c499c658fd4f4cab97fda09",
    "f6bce1bee803855dda21be200e843e4a",
    "f83219831fee17b27cfcf00c031f5822",
    "fbe2ec21effdc162dce15cb645714705",
    "fc856c89dd0e4f760a7e25262b0fca7b",
    "fcfdd0c3cffc2c99b6bac44aed534e07",
    "fd65337df67be20768a678b82e7022b5",
    "fde129e62f690cb899410aef66321588",
    "ff12c7a922edd54cfc53b45dfa471e05",
})
