"""Code tables: a few values clients depend on and the 4.x/5.x shared values."""

from orbitmq.protocol import LanguageCode, RequestCode, ResponseCode


def test_request_codes_sample():
    assert RequestCode.SEND_MESSAGE == 10 and RequestCode.SEND_MESSAGE_V2 == 310
    assert RequestCode.PULL_MESSAGE == 11 and RequestCode.HEART_BEAT == 34
    assert RequestCode.GET_ROUTEINFO_BY_TOPIC == 105 and RequestCode.POP_MESSAGE == 200050
    assert RequestCode(40) is RequestCode.NOTIFY_CONSUMER_IDS_CHANGED


def test_response_codes_and_shared_values():
    assert ResponseCode.PULL_NOT_FOUND == 19 and ResponseCode.QUERY_NOT_FOUND == 22
    assert ResponseCode(209) is ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED
    assert ResponseCode.POLLING_FULL == 209 and ResponseCode.RPC_TIME_OUT == -1006


def test_language_codes():
    assert [lc.name for lc in LanguageCode][:4] == ["JAVA", "CPP", "DOTNET", "PYTHON"]
    assert LanguageCode.GO == 9 and LanguageCode.NODE_JS == 13
